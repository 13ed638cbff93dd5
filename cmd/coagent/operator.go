package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/coagent/coagent/internal/natsauth"
)

// ensureOperator registers the operator in reg, and writes its seed, when
// no registered agent has the role admin (natsauth.EnsureOperator). It
// says what it did on stderr. On a node of a cluster (node is its name,
// "" alone) it says besides that the other nodes need this registry: each
// node's server admits the agents of its own, so a node started on an
// empty one would make an admin of its own, whom the others do not know.
func ensureOperator(data, node string, reg *natsauth.Registry, stderr io.Writer) error {
	seedPath, err := reg.EnsureOperator(data)
	switch {
	case errors.Is(err, natsauth.ErrOperatorNameTaken):
		fmt.Fprintf(stderr, "coagent: no agent has the role admin, so nobody may run rules set or dlq; add one with 'coagent agents add NAME --role admin'\n")
		return nil
	case err != nil:
		return err
	case seedPath == "":
		return nil
	}
	fmt.Fprintf(stderr, "coagent: registered the operator %q (role admin, for rules set and dlq); its key is %s: keep it secret\n", natsauth.OperatorName, seedPath)
	if node != "" {
		fmt.Fprintf(stderr, "coagent: node %s of a cluster: copy %s to every other node's data directory before it starts, and after each agents add or remove (then SIGHUP): each node admits the agents of its own registry\n",
			node, natsauth.RegistryPath(data))
	}
	return nil
}
