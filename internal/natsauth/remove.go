package natsauth

import (
	"errors"
	"fmt"
)

// ErrNotRegistered is returned by Remove for a name not registered.
var ErrNotRegistered = errors.New("natsauth: agent not registered")

// Remove takes name out of the registry. It changes only r; Save persists
// it, and a server started with the registry admits the agent until it
// reloads it.
func (r *Registry) Remove(name string) error {
	if _, ok := r.Agents[name]; !ok {
		return fmt.Errorf("%w: %s", ErrNotRegistered, name)
	}
	delete(r.Agents, name)
	return nil
}
