package intents

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// FeedMessage is one message of the change feed: changes of one board,
// in revision order, from one commit group (a group that wrote to several
// boards puts a message on each). A change that wrote to several boards
// is in a message of each, whole: a watcher keeps the writes that overlap
// what it watches, and skips a revision it has already seen. (Wire v2 put
// one message per path written, each a change event of its own; the feed
// of a v2 coordinator may still hold some, and DecodeFeed reads both.)
type FeedMessage struct {
	Changes []*Event `json:"changes"`
}

// DecodeFeed returns the changes a change feed message carries, in
// revision order: a FeedMessage's, or the one change event a wire v2
// message was.
func DecodeFeed(data []byte) ([]*Event, error) {
	var m struct {
		Changes []*Event  `json:"changes"`
		Type    EventType `json:"type"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("change feed message: %w", err)
	}
	if m.Type == "" {
		for i, ev := range m.Changes {
			if ev == nil || ev.Type != EventChange || ev.Change == nil {
				return nil, fmt.Errorf("change feed message: changes[%d] is not a change event", i)
			}
			if i > 0 && ev.Seq <= m.Changes[i-1].Seq {
				return nil, fmt.Errorf("change feed message: changes[%d] has revision %d, not above %d", i, ev.Seq, m.Changes[i-1].Seq)
			}
		}
		if len(m.Changes) == 0 {
			return nil, errors.New("change feed message: no changes")
		}
		return m.Changes, nil
	}
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, fmt.Errorf("change feed message: %w", err)
	}
	if ev.Type != EventChange || ev.Change == nil {
		return nil, fmt.Errorf("change feed message: a %q event, not a change", ev.Type)
	}
	return []*Event{&ev}, nil
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
