package eventlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOptionsDefaults: zero Options take the defaults their fields
// document, and Open leaves the caller's Options as they were.
func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.IndexEvery != 4096 || o.NoSync || o.Pebble != nil || o.indexIdle != indexIdle || o.retryPause != retryPause {
		t.Fatalf("the zero Options' defaults: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults are not valid: %v", err)
	}
	mine := Options{NoSync: true}
	l, err := Open(t.TempDir(), &mine)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.indexEvery != 4096 {
		t.Errorf("the log indexes every %d events, want the default 4096", l.indexEvery)
	}
	if mine.IndexEvery != 0 || mine.indexIdle != 0 || mine.retryPause != 0 {
		t.Errorf("Open changed the caller's Options: %+v", mine)
	}
}

// TestOpenRefusesBadOptions: Open refuses options Validate finds wrong
// before it makes anything, and names every bad field with its value.
func TestOpenRefusesBadOptions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	l, err := Open(dir, &Options{IndexEvery: -3, retryPause: -1})
	if err == nil {
		l.Close()
		t.Fatal("Open took bad options")
	}
	for _, w := range []string{"eventlog: open " + dir + ": ", "IndexEvery is negative (-3)", "retryPause is negative (-1ns)"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Open refused its options but made the directory: %v", err)
	}
}
