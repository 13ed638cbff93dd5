package arbiter

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coagent/coagent/intents"
)

// ErrNoIntent is returned (wrapped) by Retry for a case that does not
// carry its escalated intent.
var ErrNoIntent = errors.New("arbiter: the case holds no escalated intent")

// Retry returns the intent that retries a case no arbiter resolved by its
// deadline (a dead letter): the escalated intent again under the new id,
// its meta recording the case's id under "retry_of", so that it is decided
// anew and escalates again if it still conflicts. c is left as it was. The
// new id is the caller's (a fresh ULID), as every id is. A case without its
// escalated intent, or whose intent's meta is not a JSON object, is an
// error naming the case.
func Retry(c *intents.Escalation, id string) (*intents.Intent, error) {
	in := c.Escalated()
	if in == nil {
		return nil, fmt.Errorf("%w: case %s", ErrNoIntent, c.ID)
	}
	again := *in
	again.ID = id
	meta := map[string]json.RawMessage{}
	if len(in.Meta) > 0 {
		if err := json.Unmarshal(in.Meta, &meta); err != nil || meta == nil {
			return nil, fmt.Errorf("arbiter: case %s: the escalated intent's meta %s is not a JSON object", c.ID, in.Meta)
		}
	}
	meta["retry_of"], _ = json.Marshal(c.ID)
	data, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("arbiter: case %s: meta: %w", c.ID, err)
	}
	again.Meta = data
	return &again, nil
}
