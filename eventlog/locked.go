package eventlog

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// ErrLocked is what a *LockedError matches: the log's directory is open in
// another process.
var ErrLocked = errors.New("eventlog: the directory is open in another process")

// LockedError is Open's error when another process holds the store's lock:
// a coordinator running on the directory, or another command reading it.
// Only one process opens a log at a time, so a reader of a running
// coordinator's log asks that coordinator over the wire instead.
type LockedError struct {
	Dir string
	Err error // the lock's own error, from the system
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("eventlog: %s is open in another process (a coordinator running on it, or another command): %v", e.Dir, e.Err)
}

// Is makes a *LockedError match ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

func (e *LockedError) Unwrap() error { return e.Err }

// lockErr returns err as a *LockedError if it is the refusal of the store's
// lock, or nil. Pebble locks its LOCK file with fcntl(F_SETLK), which fails
// with EAGAIN or EACCES while another process holds it; the same errnos
// from opening a file come wrapped in an *fs.PathError, which is not a
// lock. (A second Open in the same process is refused by Pebble with an
// error of no type, "lock held by current process", which is left as it
// is: it is a bug of the caller, not a server to ask instead.)
func lockErr(dir string, err error) *LockedError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		return &LockedError{Dir: dir, Err: err}
	}
	return nil
}
