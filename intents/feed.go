package intents

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// FeedMessage is one message of the change feed: changes of one board,
// in revision order, from the commit groups of a moment (a moment that
// wrote to several boards puts a message on each). A change that wrote to
// several boards is in a message of each, whole: a watcher keeps the
// writes that overlap what it watches, and skips a revision it has
// already seen. (Wire v2 put one message per path written, each a change
// event of its own; the feed of a v2 coordinator may still hold some, and
// DecodeFeedMessage reads both.)
//
// Prev and BoardPrev chain the messages, so that a watcher can tell that
// the feed lacks one (another writer took its place in the stream, or a
// coordinator's bug): Prev is the revision of the last change the feed
// carried before this message, on any board, and BoardPrev the same on
// this message's board. 0 is not known (and, for BoardPrev, none).
type FeedMessage struct {
	Prev      uint64   `json:"prev,omitempty"`
	BoardPrev uint64   `json:"board_prev,omitempty"`
	Changes   []*Event `json:"changes"`
}

// DecodeFeed returns the changes a change feed message carries, in
// revision order.
func DecodeFeed(data []byte) ([]*Event, error) {
	m, err := DecodeFeedMessage(data)
	return m.Changes, err
}

// DecodeFeedMessage reads a change feed message: a FeedMessage, or the
// one change event a wire v2 message was (with no chain).
func DecodeFeedMessage(data []byte) (FeedMessage, error) {
	var m struct {
		FeedMessage
		Type EventType `json:"type"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return FeedMessage{}, fmt.Errorf("change feed message: %w", err)
	}
	if m.Type == "" {
		for i, ev := range m.Changes {
			if ev == nil || ev.Type != EventChange || ev.Change == nil {
				return FeedMessage{}, fmt.Errorf("change feed message: changes[%d] is not a change event", i)
			}
			if i > 0 && ev.Seq <= m.Changes[i-1].Seq {
				return FeedMessage{}, fmt.Errorf("change feed message: changes[%d] has revision %d, not above %d", i, ev.Seq, m.Changes[i-1].Seq)
			}
		}
		if len(m.Changes) == 0 {
			return FeedMessage{}, errors.New("change feed message: no changes")
		}
		return m.FeedMessage, nil
	}
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return FeedMessage{}, fmt.Errorf("change feed message: %w", err)
	}
	if ev.Type != EventChange || ev.Change == nil {
		return FeedMessage{}, fmt.Errorf("change feed message: a %q event, not a change", ev.Type)
	}
	return FeedMessage{Changes: []*Event{&ev}}, nil
}

// Boards returns the boards a change wrote to, in the order of its first
// write to each.
func (c *Change) Boards() []string {
	var boards []string
	for _, w := range c.Writes {
		b := Board(w.Path)
		if !slices.Contains(boards, b) {
			boards = append(boards, b)
		}
	}
	return boards
}
