package coordinator

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

const (
	parkAgents   = 100
	parkPerAgent = 100
)

// BenchmarkParkWaiters parks 10,000 waiters behind one transaction and then
// frees them all, through a real coordinator on a real server: a holder
// proposes, 10,000 intents that conflict with it (100 agents, 100 each)
// arrive at once with on_conflict wait and are answered queued, then the
// holder aborts, and every waiter is decided again and applied. It reports
// the seconds to park them all (park-s) and to free them all (free-s) per
// run, by path: api (request/reply, answered queued at once; the applied
// decision, which no request waits for, is stored for the agent) and
// stream (published on the intents stream).
func BenchmarkParkWaiters(b *testing.B) {
	for _, path := range []string{"api", "stream"} {
		b.Run(path, func(b *testing.B) {
			ns := natstest.Run(b)
			startService(b, ns, b.TempDir(), Options{})
			var park, free time.Duration
			for i := range b.N {
				p, f := parkWaiters(b, ns, path, i)
				park += p
				free += f
			}
			b.ReportMetric(park.Seconds()/float64(b.N), "park-s")
			b.ReportMetric(free.Seconds()/float64(b.N), "free-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// parkWaiters runs one round of BenchmarkParkWaiters on round's own paths.
func parkWaiters(b *testing.B, ns *server.Server, path string, round int) (park, free time.Duration) {
	subj := intents.Subjects{}
	doc := "park.r" + strconv.Itoa(round)
	holder := natstest.Connect(b, ns)
	grant := natstest.Request[intents.Decision](b, holder, subj.Submit("h"),
		fmt.Sprintf(`{"id":%q,"agent":"h","kind":"propose","lease_ms":600000,"writes":[{"path":%q,"op":"set"}]}`, ulid.Make(), doc))
	if grant.Outcome != intents.OutcomeGranted {
		b.Fatalf("holder: %+v", grant)
	}
	queued := make(chan struct{}, parkAgents*parkPerAgent)
	applied := make(chan struct{}, parkAgents*parkPerAgent)
	errs := make(chan error, parkAgents)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for a := range parkAgents {
		agent := "w" + strconv.Itoa(a)
		nc := natstest.Connect(b, ns, nats.CustomInboxPrefix(intents.InboxPrefix(agent)))
		decs, err := nc.SubscribeSync(subj.Decisions(agent))
		if err != nil {
			b.Fatal(err)
		}
		replies, err := nc.SubscribeSync(intents.InboxPrefix(agent) + ".park.*")
		if err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			raws := make([][]byte, parkPerAgent)
			send := func(j int) error {
				if path == "stream" {
					return nc.Publish(subj.Intents(agent), raws[j])
				}
				m := nats.NewMsg(subj.Submit(agent))
				m.Header.Set(intents.HeaderWait, "0")
				m.Reply, m.Data = replies.Subject[:len(replies.Subject)-1]+strconv.Itoa(j), raws[j]
				return nc.PublishMsg(m)
			}
			for j := range parkPerAgent {
				raws[j] = fmt.Appendf(nil, `{"id":%q,"agent":%q,"kind":"apply","on_conflict":"wait","wait_ms":600000,"writes":[{"path":"%s.%s_%d","op":"set","value":%d}]}`,
					ulid.Make(), agent, doc, agent, j, j)
				if err := send(j); err != nil {
					errs <- err
					return
				}
			}
			// Every intent gets a queued decision, then an applied one: on
			// the API path the queued one is the reply, and the applied
			// one, which no request waits for any more, is stored on the
			// agent's decisions. A submit answered unavailable (the
			// coordinator's intake is full: 10,000 arrive at once) is sent
			// again, as a client does.
			for n := 0; n < 2*parkPerAgent; {
				sub := decs
				if path == "api" && n < parkPerAgent {
					sub = replies
				}
				m, err := sub.NextMsg(time.Minute)
				if err != nil {
					errs <- fmt.Errorf("agent %s: %w", agent, err)
					return
				}
				if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
					j, _ := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
					if code != "unavailable" {
						errs <- fmt.Errorf("agent %s: intent %d: %s %s", agent, j, code, m.Header.Get(micro.ErrorHeader))
						return
					}
					if err := send(j); err != nil {
						errs <- err
						return
					}
					continue
				}
				n++
				var d intents.Decision
				if err := json.Unmarshal(m.Data, &d); err != nil {
					errs <- err
					return
				}
				switch d.Outcome {
				case intents.OutcomeQueued:
					queued <- struct{}{}
				case intents.OutcomeApplied:
					applied <- struct{}{}
				default:
					errs <- fmt.Errorf("agent %s: %s", agent, m.Data)
					return
				}
			}
		})
	}
	ready.Wait()
	began := time.Now()
	close(start)
	await := func(ch chan struct{}, what string) {
		for n := 0; n < parkAgents*parkPerAgent; n++ {
			select {
			case <-ch:
			case err := <-errs:
				b.Fatalf("%s: %v", what, err)
			case <-time.After(time.Minute):
				b.Fatalf("%s: %d of %d after a minute", what, n, parkAgents*parkPerAgent)
			}
		}
	}
	await(queued, "queued")
	park = time.Since(began)
	began = time.Now()
	abort := natstest.Request[intents.Decision](b, holder, subj.Submit("h"),
		fmt.Sprintf(`{"id":%q,"agent":"h","kind":"abort","txn":%q,"fence":%d}`, ulid.Make(), grant.Txn, grant.Fence))
	if abort.Outcome != intents.OutcomeAborted {
		b.Fatalf("abort: %+v", abort)
	}
	await(applied, "applied")
	free = time.Since(began)
	done.Wait()
	return park, free
}
