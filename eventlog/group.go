package eventlog

import (
	"encoding/binary"
	"fmt"

	"github.com/coagent/coagent/intents"
)

// The encoding of a durable group as one message of a replicated log
// (SPEC §10, COAGENT_LOG): its version byte, GroupVersion, the number of
// events as a uvarint, then each event as its record (AppendEvent), each
// preceded by its length as a uvarint, and nothing after. The events are
// exactly what the log stores, so a follower that decodes a group and
// folds it stores the same records, under the same seqs, as the writer.

// GroupVersion is the first byte of an encoded group.
const GroupVersion = 1

// maxGroupEvents bounds the count a group may claim, before the records
// are read: a bound on what a damaged message can make DecodeGroup
// allocate (each record takes at least 20 bytes, so the bytes bound it
// too).
const maxGroupEvents = 1 << 20

// AppendGroup appends the encoding of a group of events (in seq order) to
// dst and returns it.
func AppendGroup(dst []byte, evs []*intents.Event) []byte {
	dst = append(dst, GroupVersion)
	dst = binary.AppendUvarint(dst, uint64(len(evs)))
	var rec []byte
	for _, ev := range evs {
		rec = AppendEvent(rec[:0], ev)
		dst = binary.AppendUvarint(dst, uint64(len(rec)))
		dst = append(dst, rec...)
	}
	return dst
}

// DecodeGroup decodes a group encoded by AppendGroup. It checks that the
// group holds at least one event and that the seqs follow one another.
// Errors wrap ErrCorrupt or ErrVersion and name the event and the byte
// offset at fault; DecodeGroup never panics.
func DecodeGroup(data []byte) ([]*intents.Event, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: group: empty", ErrCorrupt)
	}
	if data[0] != GroupVersion {
		return nil, fmt.Errorf("%w: group: version %d (this build reads %d)", ErrVersion, data[0], GroupVersion)
	}
	off := 1
	n, k := binary.Uvarint(data[off:])
	if k <= 0 {
		return nil, fmt.Errorf("%w: group: event count at byte %d: not a uvarint", ErrCorrupt, off)
	}
	off += k
	if n == 0 || n > maxGroupEvents || n > uint64(len(data)-off) {
		return nil, fmt.Errorf("%w: group: event count %d at byte 1 (the group has %d bytes)", ErrCorrupt, n, len(data))
	}
	evs := make([]*intents.Event, 0, n)
	for i := range n {
		size, k := binary.Uvarint(data[off:])
		if k <= 0 || size > uint64(len(data)-off-k) {
			return nil, fmt.Errorf("%w: group: length of event %d at byte %d: past the end (%d bytes)", ErrCorrupt, i, off, len(data))
		}
		off += k
		ev, err := DecodeEvent(data[off : off+int(size)])
		if err != nil {
			return nil, fmt.Errorf("group: event %d at byte %d: %w", i, off, err)
		}
		if i > 0 && ev.Seq != evs[i-1].Seq+1 {
			return nil, fmt.Errorf("%w: group: event %d has seq %d after %d", ErrCorrupt, i, ev.Seq, evs[i-1].Seq)
		}
		off += int(size)
		evs = append(evs, ev)
	}
	if off != len(data) {
		return nil, fmt.Errorf("%w: group: %d bytes after the last event", ErrCorrupt, len(data)-off)
	}
	return evs, nil
}
