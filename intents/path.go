package intents

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Path limits of SPEC §1.
const (
	MaxSegmentLen = 128
	MaxDepth      = 32
)

// ValidSegment reports whether s is a legal path segment: 1–128 Unicode
// letters, digits, '_' or '-'. The same rule makes a segment a legal NATS
// subject token, which is why agent names follow it too.
func ValidSegment(s string) bool {
	if s == "" || len(s) > 4*MaxSegmentLen {
		return false
	}
	n := 0
	for _, r := range s {
		if r == utf8.RuneError || !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-') {
			return false
		}
		n++
	}
	return n <= MaxSegmentLen
}

// CheckPath returns why p is not a legal path, or nil.
func CheckPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	depth := 0
	for seg := range strings.SplitSeq(p, ".") {
		depth++
		if depth > MaxDepth {
			return fmt.Errorf("deeper than %d segments", MaxDepth)
		}
		if !ValidSegment(seg) {
			return fmt.Errorf("segment %q is not 1–%d letters, digits, '_' or '-'", seg, MaxSegmentLen)
		}
	}
	return nil
}

// Board returns the first segment of p: the region it belongs to.
func Board(p string) string {
	if i := strings.IndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return p
}

// Document returns the first two segments of p (the board and the record in
// it), or p itself when it has fewer. Disjoint edits inside one document are
// the ones reported in a decision's merged_with.
func Document(p string) string {
	i := strings.IndexByte(p, '.')
	if i < 0 {
		return p
	}
	if j := strings.IndexByte(p[i+1:], '.'); j >= 0 {
		return p[:i+1+j]
	}
	return p
}

// Overlaps reports whether one of a and b is a segment-wise prefix of the
// other (a.b overlaps a.b.c, not a.bc): the only notion of "same data" in
// conflict detection.
func Overlaps(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return strings.HasPrefix(b, a) && (len(a) == len(b) || b[len(a)] == '.')
}

// Within reports whether p equals root or lies under it.
func Within(p, root string) bool {
	return strings.HasPrefix(p, root) && (len(p) == len(root) || p[len(root)] == '.')
}
