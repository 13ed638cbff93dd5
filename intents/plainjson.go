package intents

import (
	"strings"
	"unicode/utf8"
)

// plainReader reads the subset of JSON that UnmarshalDecision and Decode
// read by hand: what the coordinator and its clients write for the usual
// intents and decisions. Each method reports false where the input leaves
// that subset, and the caller then hands the whole input to
// go-json-experiment; so the reader only has to be right for what it
// takes, which FuzzUnmarshalDecision and FuzzDecodePlain check against
// go-json-experiment.
type plainReader struct {
	data []byte
	pos  int
	// text is data as one string, made once: the strings decoded are
	// pieces of it rather than an allocation each, so a string kept keeps
	// one copy of the document, no more.
	text string
}

// reset starts reading data.
func (r *plainReader) reset(data []byte) {
	r.data, r.pos, r.text = data, 0, string(data)
}

// end reports whether nothing but white space is left.
func (r *plainReader) end() bool {
	r.space()
	return r.pos == len(r.data)
}

func (r *plainReader) space() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// byte consumes c, after white space.
func (r *plainReader) byte(c byte) bool {
	r.space()
	if r.pos < len(r.data) && r.data[r.pos] == c {
		r.pos++
		return true
	}
	return false
}

// plain reads a string of valid UTF-8 with no control character and no
// escape but the two-character ones (\" \\ \/ \b \f \n \r \t), and
// returns it: a piece of r.text where nothing was escaped.
func (r *plainReader) plain() (string, bool) {
	if !r.byte('"') {
		return "", false
	}
	for i := r.pos; i < len(r.data); {
		switch c := r.data[i]; {
		case c == '"':
			s := r.text[r.pos:i]
			r.pos = i + 1
			return s, true
		case c == '\\':
			return r.unescape(i)
		case c < ' ':
			return "", false
		case c < utf8.RuneSelf:
			i++
		default:
			ch, size := utf8.DecodeRune(r.data[i:])
			if ch == utf8.RuneError && size == 1 {
				return "", false
			}
			i += size
		}
	}
	return "", false
}

// unescape reads the rest of the string plain began, from its first
// escape at i.
func (r *plainReader) unescape(i int) (string, bool) {
	buf := append(make([]byte, 0, i-r.pos+16), r.data[r.pos:i]...)
	for i < len(r.data) {
		switch c := r.data[i]; {
		case c == '"':
			r.pos = i + 1
			return string(buf), true
		case c == '\\':
			if i+1 == len(r.data) {
				return "", false
			}
			e := r.data[i+1]
			switch e {
			case '"', '\\', '/':
			case 'b':
				e = '\b'
			case 'f':
				e = '\f'
			case 'n':
				e = '\n'
			case 'r':
				e = '\r'
			case 't':
				e = '\t'
			default:
				return "", false // \u, whose surrogates are go-json-experiment's to judge, or not an escape
			}
			buf = append(buf, e)
			i += 2
		case c < ' ':
			return "", false
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			ch, size := utf8.DecodeRune(r.data[i:])
			if ch == utf8.RuneError && size == 1 {
				return "", false
			}
			buf = append(buf, r.data[i:i+size]...)
			i += size
		}
	}
	return "", false
}

func (r *plainReader) str(dst *string) bool {
	s, ok := r.plain()
	if ok {
		*dst = s
	}
	return ok
}

// uint reads a number that is a plain uint64: digits, no leading zero,
// no sign, fraction or exponent, and no overflow.
func (r *plainReader) uint(dst *uint64) bool {
	r.space()
	start, n := r.pos, uint64(0)
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		digit := uint64(r.data[r.pos] - '0')
		if n > (1<<64-1-digit)/10 {
			return false
		}
		n = n*10 + digit
		r.pos++
	}
	switch digits := r.pos - start; {
	case digits == 0, digits > 1 && r.data[start] == '0':
		return false
	}
	if r.pos < len(r.data) {
		switch r.data[r.pos] {
		case '.', 'e', 'E':
			return false
		}
	}
	*dst = n
	return true
}

func (r *plainReader) bool(dst *bool) bool {
	r.space()
	rest := r.data[r.pos:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*dst, r.pos = true, r.pos+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*dst, r.pos = false, r.pos+5
	default:
		return false
	}
	return true
}

// object reads an object, handing each member's name to member, which
// reads its value and returns the member's bit among a struct's fields
// (0 where the names are a map's keys, or a raw value's), so that a field
// given twice leaves the subset.
func (r *plainReader) object(member func(name string) (bit uint, ok bool)) bool {
	if !r.byte('{') {
		return false
	}
	if r.byte('}') {
		return true
	}
	var seen uint
	for {
		name, ok := r.plain()
		if !ok || !r.byte(':') {
			return false
		}
		bit, ok := member(name)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if r.byte('}') {
			return true
		}
		if !r.byte(',') {
			return false
		}
	}
}

// array reads an array, each element with elem.
func (r *plainReader) array(elem func() bool) bool {
	if !r.byte('[') {
		return false
	}
	if r.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if r.byte(']') {
			return true
		}
		if !r.byte(',') {
			return false
		}
	}
}

func (r *plainReader) strs(dst *[]string) bool {
	ss := []string{}
	ok := r.array(func() bool {
		s, ok := r.plain()
		ss = append(ss, s)
		return ok
	})
	*dst = ss
	return ok
}

// int reads a number that is a plain int64: uint's form with an optional
// minus sign.
func (r *plainReader) int(dst *int64) bool {
	r.space()
	neg := r.pos < len(r.data) && r.data[r.pos] == '-'
	if neg {
		r.pos++
		if r.pos == len(r.data) || r.data[r.pos] < '0' || r.data[r.pos] > '9' {
			return false // white space after the sign, or none
		}
	}
	var n uint64
	if !r.uint(&n) {
		return false
	}
	switch {
	case !neg && n <= 1<<63-1:
		*dst = int64(n)
	case neg && n <= 1<<63:
		*dst = int64(-n)
	default:
		return false
	}
	return true
}

// maxPlainDepth and maxPlainMembers bound the raw values read by hand:
// deeper ones, and objects with more members (whose names are compared
// with each other for one given twice), go to go-json-experiment.
const (
	maxPlainDepth   = 8
	maxPlainMembers = 16
)

// raw reads a JSON value and returns a copy of its bytes as they are. It
// is a copy of its own, not a piece of one copy of data as the strings
// are, so that an intent the engine holds in flight does not keep its
// document twice.
func (r *plainReader) raw(dst *[]byte) bool {
	r.space()
	start := r.pos
	if !r.value(0) {
		return false
	}
	*dst = append([]byte(nil), r.data[start:r.pos]...)
	return true
}

// value skips a JSON value, its strings plain, an object's member names
// each given once.
func (r *plainReader) value(depth int) bool {
	r.space()
	if r.pos == len(r.data) || depth > maxPlainDepth {
		return false
	}
	switch c := r.data[r.pos]; {
	case c == '"':
		_, ok := r.plain()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		return r.number()
	case c == '[':
		return r.array(func() bool { return r.value(depth + 1) })
	case c == '{':
		var names [maxPlainMembers]string
		n := 0
		return r.object(func(name string) (uint, bool) {
			if n == len(names) {
				return 0, false
			}
			for _, seen := range names[:n] {
				if seen == name {
					return 0, false
				}
			}
			names[n] = name
			n++
			return 0, r.value(depth + 1)
		})
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(r.data)-r.pos >= len(lit) && string(r.data[r.pos:r.pos+len(lit)]) == lit {
			r.pos += len(lit)
			return true
		}
	}
	return false
}

// number skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *plainReader) number() bool {
	digits := func() int {
		start := r.pos
		for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
			r.pos++
		}
		return r.pos - start
	}
	next := func(set string) bool {
		if r.pos < len(r.data) && strings.IndexByte(set, r.data[r.pos]) >= 0 {
			r.pos++
			return true
		}
		return false
	}
	next("-")
	start := r.pos
	if n := digits(); n == 0 || n > 1 && r.data[start] == '0' {
		return false
	}
	if next(".") && digits() == 0 {
		return false
	}
	if next("eE") {
		next("+-")
		if digits() == 0 {
			return false
		}
	}
	return true
}
