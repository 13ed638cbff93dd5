// Package migrate brings the JetStream streams a wire v1 coordinator made
// to wire v2: the work-queue intents stream becomes an interest stream with
// the coordinator's AckAll consumer, every stored intent moved in order,
// and the events stream keeps only the change feed. The coordinator calls
// Streams once at start, before it checks its streams or takes an intent;
// a run that is killed is finished by the next one, from what the streams
// themselves record, and a stream it cannot move safely is refused
// (ErrRefused) with the nats command to run. It knows the streams by the
// names package intents gives them and never imports the coordinator, so
// the one-off upgrade stays apart from the service that runs every day
// (docs/wire.md, "Upgrading from wire v1").
package migrate
