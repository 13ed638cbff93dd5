package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
)

// Pattern is a path pattern: segments, where `*` matches any one segment
// and a final `**` any number of them, none included (`facts.**` matches
// facts and everything under it).
type Pattern struct {
	src  string
	segs []string
	deep bool
}

// ParsePattern parses a pattern.
func ParsePattern(s string) (Pattern, error) {
	if s == "" {
		return Pattern{}, errors.New("empty pattern")
	}
	p := Pattern{src: s}
	segs := strings.Split(s, ".")
	for i, seg := range segs {
		switch {
		case seg == "**" && i == len(segs)-1:
			p.deep = true
		case seg == "**":
			return Pattern{}, fmt.Errorf("%q: ** may only end a pattern", s)
		case seg == "*" || intents.ValidSegment(seg):
			p.segs = append(p.segs, seg)
		default:
			return Pattern{}, fmt.Errorf("%q: segment %q is not a path segment, * or **", s, seg)
		}
	}
	if len(p.segs) > intents.MaxDepth {
		return Pattern{}, fmt.Errorf("%q: deeper than %d segments", s, intents.MaxDepth)
	}
	return p, nil
}

func (p Pattern) String() string { return p.src }

// prefixMatches reports whether the first len(p.segs) segments of path
// match, given path has at least that many.
func (p Pattern) prefixMatches(segs []string) bool {
	for i, s := range p.segs {
		if s != "*" && s != segs[i] {
			return false
		}
	}
	return true
}

// compare walks path against the pattern's segments without allocating:
// it reports whether the segments both have agree, and how path's depth
// compares with the pattern's (-1 shorter, 0 equal, 1 deeper).
func (p Pattern) compare(path string) (agree bool, depth int) {
	rest := path
	for i, s := range p.segs {
		if rest == "" && i > 0 {
			return true, -1
		}
		seg, tail, _ := strings.Cut(rest, ".")
		if s != "*" && s != seg {
			return false, 0
		}
		if tail == "" && !strings.Contains(rest, ".") {
			if i < len(p.segs)-1 {
				return true, -1
			}
			return true, 0
		}
		rest = tail
	}
	return true, 1
}

// Matches reports whether path is one of the paths the pattern names.
func (p Pattern) Matches(path string) bool {
	agree, depth := p.compare(path)
	return agree && (depth == 0 || depth > 0 && p.deep)
}

// Covers reports whether path is matched or lies under a matched path.
func (p Pattern) Covers(path string) bool {
	agree, depth := p.compare(path)
	return agree && depth >= 0
}

// Overlaps reports whether writing path can change a matched path: path is
// matched, under a matched path, or above one.
func (p Pattern) Overlaps(path string) bool {
	agree, _ := p.compare(path)
	return agree
}

// concrete returns the matched paths a write to path can change, as they
// exist before or after the change: the matched ancestor-or-self of path
// (for a deep pattern, path itself), or the matched paths under it.
func (p Pattern) concrete(path string, before, after cond.Reader) []string {
	segs := strings.Split(path, ".")
	if len(segs) >= len(p.segs) {
		if !p.prefixMatches(segs) {
			return nil
		}
		if p.deep {
			return []string{path}
		}
		return []string{strings.Join(segs[:len(p.segs)], ".")}
	}
	found := map[string]bool{}
	for _, r := range []cond.Reader{before, after} {
		v, ok := r.Get(path)
		if !ok {
			continue
		}
		p.walk(path, len(segs), v, found)
	}
	return slices.Sorted(maps.Keys(found))
}

// walk collects the matched paths inside v, the value at path, whose depth
// (in segments) is depth.
func (p Pattern) walk(path string, depth int, v any, found map[string]bool) {
	if depth == len(p.segs) {
		found[path] = true
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	seg := p.segs[depth]
	for k, child := range obj {
		if seg == "*" || seg == k {
			p.walk(path+"."+k, depth+1, child, found)
		}
	}
}
