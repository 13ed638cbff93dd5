package bugs

import "testing"

func TestParse(t *testing.T) {
	for _, name := range Names() {
		s, err := Parse(name)
		if err != nil || s.String() != name || s == (Set{}) {
			t.Errorf("Parse(%q) = %+v, %v", name, s, err)
		}
	}
	if s, err := Parse(""); err != nil || s != (Set{}) {
		t.Errorf("Parse(\"\") = %+v, %v", s, err)
	}
	if _, err := Parse("dirty-reads,nonsense"); err == nil {
		t.Error("an unknown bug was taken")
	}
}
