// Package cluster runs a coordinator as one member of a cluster (SPEC
// §10): of the coordinators that share a NATS JetStream cluster, one is
// active and the others stand by, so that a standby takes over when the
// active one stops or is cut off. A Member holds the leadership key of a
// replicated key-value bucket by a lease it renews (lease.go); as a
// standby it follows the replicated log COAGENT_LOG into its own event
// log and engine (follow.go) and answers reads on its own subjects
// through coordinator.Standby; once it holds the key and has read the log
// to its end it starts the coordinator.Service with the Core it followed
// with (lead.go, coordinator.StartActive), whose every group it appends to
// the replicated log, fenced by the expected last sequence, before the
// local log writes it (replog.go, a coordinator.Replicator); and, while
// active, it stores snapshots of the replicated log and trims it below
// them (snapshot.go, snapshotapi.go). Package coordinator knows nothing
// of this package: the Service and the Core are its, and it gives a
// member only StartActive, Active, Replicator, Standby and a few methods
// of Core and Service.
//
//	m, err := cluster.Start(ctx, nc, dir, cluster.Options{Node: "a"})
//	defer m.Stop(ctx) // an active member hands the key over at once
package cluster
