// Package natsauth gives agents identities that the NATS server itself
// enforces, and runs the embedded server that enforces them: `coagent
// agents` writes the agent registry, `coagent serve --auth` starts a server
// whose users are the registry's agents and reloads them on SIGHUP. The
// registry (DATA/agents.json) lists each agent's roles and the public half
// of its nkey; the agent keeps the seed. Each agent's server user may
// publish intents only on coagent.intents.<itself>, read only its own
// decisions and notices, follow the change feed, call the read-only API and
// the identity-checked submit and, for arbiters, work the arbiter queue;
// an admin, the operator, may besides put rules in force and work the
// dead letters (RoleAdmin).
// The coordinator connects with a key of its own, made at every start and
// held only by the process. The embedded server lives here with its users
// because a reload gives the server all its options again, not only the
// users. With an external NATS server the same permissions are the
// operator's to set; Permissions lists them.
//
// The main types: Registry (Load, Add, Save, EnsureOperator; Users and
// Permissions turn it into server users) and Server (StartServer, Connect as the coordinator,
// Reload). MergeRoles gives the board rules the registry's roles.
package natsauth
