package team

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
)

// material is a source the researcher gathered, as the state holds it at
// materials.<id>.
type material struct {
	ID      string `json:"-"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Summary string `json:"summary"`
}

// section is a section of the outline, at report.sections.<id>.
type section struct {
	ID    string `json:"-"`
	Title string `json:"title"`
	Cites string `json:"cites"`
	Owner string `json:"owner,omitempty"`
	Text  string `json:"text,omitempty"`
}

// outline is what the researcher planned: one section per writer, each
// citing its own material.
type outline struct {
	sections  []section
	materials []material
}

var sectionTitles = []string{"Background", "Approach", "Findings", "Risks", "Costs", "Operations", "Outlook", "Open questions"}

var sourceTitles = []string{
	"Field notes from three agent teams",
	"A benchmark of shared-state coordination",
	"A survey of optimistic concurrency control",
	"Interviews with platform engineers",
	"Incident reviews of lost updates",
	"Event sourcing in production",
	"A study of lease-based locking",
	"Arbitration in multi-agent systems",
}

func nth(xs []string, i int, more string) string {
	if i < len(xs) {
		return xs[i]
	}
	return fmt.Sprintf("%s %d", more, i+1)
}

// gather is the researcher's work: a material per section, each summarized
// by its model and applied, then the outline.
func (t *teamRun) gather(ctx context.Context, r *member) (*outline, error) {
	o := &outline{}
	for i := range t.cfg.Writers {
		m := material{ID: fmt.Sprintf("m%d", i+1), Title: nth(sourceTitles, i, "Source"), Status: "approved"}
		var err error
		if m.Summary, err = complete(ctx, t.cfg.Models.Researcher, summaryPrompt(Title, m.Title)); err != nil {
			return nil, fmt.Errorf("team: researcher: %w", err)
		}
		d, err := r.apply(ctx, intents.Apply("gather_material").
			Pre(fmt.Sprintf("state.materials.%s == nil", m.ID)).
			Set("materials."+m.ID, m))
		if err != nil {
			return nil, fmt.Errorf("team: researcher: gather %s: %w", m.ID, err)
		}
		t.emit(r.name, Gathered, "gathered %s %q (applied, rev %d)", m.ID, m.Title, d.Rev)
		o.materials = append(o.materials, m)
		o.sections = append(o.sections, section{ID: fmt.Sprintf("s%d", i+1), Title: nth(sectionTitles, i, "Part"), Cites: m.ID})
	}
	b := intents.Apply("outline").Pre("state.report == nil").Set("report.title", Title).Set("report.intro", draftIntro)
	for _, s := range o.sections {
		b.Set("report.sections."+s.ID, s)
	}
	d, err := r.apply(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("team: researcher: outline: %w", err)
	}
	t.emit(r.name, Outlined, "outlined %q: %d sections, each citing one material, and a draft intro (applied, rev %d)", Title, len(o.sections), d.Rev)
	return o, nil
}

// claim is the writers' race for sections. All go at once; the first two
// want the first section, the others one each of their own. A writer that
// loses reads who owns what once the others are done and claims the first
// section left.
func (t *teamRun) claim(ctx context.Context, ws []*member, o *outline) error {
	won := make([]bool, len(ws))
	start := make(chan struct{})
	g := newGroup(ctx)
	for i, w := range ws {
		wish := o.sections[i]
		if i == 1 {
			wish = o.sections[0]
		}
		g.Go(func(ctx context.Context) error {
			if err := await(ctx, start); err != nil {
				return err
			}
			var err error
			won[i], err = t.tryClaim(ctx, w, wish, "")
			return err
		})
	}
	close(start)
	if err := g.Wait(); err != nil {
		return err
	}
	for i, w := range ws {
		for tries := 0; !won[i]; tries++ {
			if tries == len(o.sections) {
				return fmt.Errorf("team: %s found no section to claim", w.name)
			}
			st, err := w.c.Read(ctx, "report.sections")
			if err != nil {
				return fmt.Errorf("team: %s: %w", w.name, err)
			}
			var owned map[string]section
			if err := st.Values["report.sections"].Decode(&owned); err != nil {
				return fmt.Errorf("team: %s: report.sections: %w", w.name, err)
			}
			free := -1
			for j, s := range o.sections {
				if owned[s.ID].Owner == "" {
					free = j
					break
				}
			}
			if free < 0 {
				return fmt.Errorf("team: %s: every section is claimed", w.name)
			}
			if won[i], err = t.tryClaim(ctx, w, o.sections[free], " instead"); err != nil {
				return err
			}
		}
	}
	return nil
}

// tryClaim applies w's claim of s, on the condition that nobody owns it
// yet; false when somebody did.
func (t *teamRun) tryClaim(ctx context.Context, w *member, s section, instead string) (bool, error) {
	path := fmt.Sprintf("report.sections.%s.owner", s.ID)
	d, err := w.apply(ctx, intents.Apply("claim_section").Pre(fmt.Sprintf("state.%s == nil", path)).Set(path, w.name))
	switch {
	case err == nil:
		lease := ""
		if d.Fence != 0 && d.LeaseExpires != nil {
			// Under a task rule with a lease (the demo sets one): the
			// section comes back if the writer stops renewing it.
			lease = fmt.Sprintf("; leased, fence %d", d.Fence)
		}
		t.emit(w.name, ClaimWon, "claimed %s %q%s (applied, rev %d%s)", s.ID, s.Title, instead, d.Rev, lease)
		return true, nil
	case errors.Is(err, agents.ErrPreconditionFailed):
		t.emit(w.name, ClaimLost, "lost the claim on %s %q: precondition_failed (%s) — claiming another", s.ID, s.Title, d.Detail)
		return false, nil
	}
	return false, fmt.Errorf("team: %s: claim %s: %w", w.name, s.ID, err)
}

// review is the editor reading the materials and choosing, with its model,
// the one to demote.
func (t *teamRun) review(ctx context.Context, e *member, o *outline) (*material, string, error) {
	paths := make([]string, len(o.materials))
	for i, m := range o.materials {
		paths[i] = "materials." + m.ID
	}
	st, err := e.c.Read(ctx, paths...)
	if err != nil {
		return nil, "", fmt.Errorf("team: editor: %w", err)
	}
	mats := make([]material, len(o.materials))
	for i, m := range o.materials {
		if err := st.Values[paths[i]].Decode(&mats[i]); err != nil {
			return nil, "", fmt.Errorf("team: editor: %s: %w", paths[i], err)
		}
		mats[i].ID = m.ID
	}
	ans, err := complete(ctx, t.cfg.Models.Editor, reviewPrompt(Title, mats))
	if err != nil {
		return nil, "", fmt.Errorf("team: editor: %w", err)
	}
	id, why, _ := strings.Cut(ans, ":")
	id, why = strings.TrimSpace(id), strings.TrimSpace(why)
	for i := range mats {
		if mats[i].ID == id {
			t.emit(e.name, Reviewed, "reviewed %d materials: %s %q is to be demoted — %s", len(mats), id, mats[i].Title, why)
			return &mats[i], why, nil
		}
	}
	return nil, "", fmt.Errorf("team: editor: the model named %q, which is not a material (%s)", id, intents.Clip(ans, 80))
}

// write is the writers writing their sections, each in a transaction that
// reads the material it cites, while the editor demotes the target
// material. Every writer goes on only once all the transactions are open,
// so each grant after the first and every commit merges with the others;
// the writer citing the target also waits until it is told that the editor
// waits on it.
func (t *teamRun) write(ctx context.Context, ws []*member, editor *member, o *outline, target *material, why string) error {
	st, err := ws[0].c.Read(ctx, "report.sections")
	if err != nil {
		return fmt.Errorf("team: %w", err)
	}
	var secs map[string]section
	if err := st.Values["report.sections"].Decode(&secs); err != nil {
		return fmt.Errorf("team: report.sections: %w", err)
	}
	owned := map[string]section{}
	for _, s := range o.sections {
		sec := secs[s.ID]
		sec.ID = s.ID
		owned[sec.Owner] = sec
	}
	open := make(chan struct{}) // closed once the target's transaction is granted
	all, landed := newBarrier(len(ws)), newBarrier(len(ws))
	g := newGroup(ctx)
	for _, w := range ws {
		s, ok := owned[w.name]
		if !ok {
			return fmt.Errorf("team: %s owns no section", w.name)
		}
		g.Go(func(ctx context.Context) error {
			return t.writeSection(ctx, w, s, all, landed, s.Cites == target.ID, open)
		})
	}
	var demoted *intents.Decision
	g.Go(func(ctx context.Context) (err error) {
		demoted, err = t.demote(ctx, editor, target, why, open)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	// Said last, when the commit it waited for has been told.
	t.emit(editor.name, Applied, "demotion of %s applied (rev %d) once the txn reading it had ended", target.ID, demoted.Rev)
	return nil
}

// writeSection is one writer's transaction. It goes on once all the
// writers' transactions are open (so every one is in flight beside the
// others), and, if it cites the material the editor demotes, commits once
// it is told that the editor waits on it. It says what its grant and its
// commit merged with once all have been granted and all have landed: then
// every transaction and commit they name has a name.
func (t *teamRun) writeSection(ctx context.Context, w *member, s section, all, landed *barrier, cited bool, open chan struct{}) error {
	path := fmt.Sprintf("report.sections.%s.text", s.ID)
	w.nameNextTxn(fmt.Sprintf("%s's txn on %s", w.name, s.ID))
	txn, err := w.propose(ctx, intents.Propose("write_section").
		Read("materials."+s.Cites).
		Write(path, intents.OpSet).
		Pre(fmt.Sprintf("state.report.sections.%s.owner == agent", s.ID)).
		Lease(lease))
	if err != nil {
		return fmt.Errorf("team: %s: write %s: %w", w.name, s.ID, err)
	}
	all.arrive()
	if err := all.wait(ctx); err != nil {
		return err
	}
	line := fmt.Sprintf("opened a txn writing %s, reading materials.%s (granted)", path, s.Cites)
	if m := txn.Grant().MergedWith; len(m) > 0 {
		t.emit(w.name, Merged, "%s; a disjoint edit of report.sections, merged with %s", line, t.namesOf(m))
	} else {
		t.emit(w.name, Opened, "%s", line)
	}
	if cited {
		close(open)
	}
	st, err := w.c.Read(ctx, "materials."+s.Cites)
	if err != nil {
		return fmt.Errorf("team: %s: %w", w.name, err)
	}
	var m material
	if err := st.Values["materials."+s.Cites].Decode(&m); err != nil {
		return fmt.Errorf("team: %s: materials.%s: %w", w.name, s.Cites, err)
	}
	text, err := complete(ctx, t.cfg.Models.Writer, sectionPrompt(Title, s.Title, m.Title, m.Summary))
	if err != nil {
		return fmt.Errorf("team: %s: %w", w.name, err)
	}
	if cited {
		n, err := w.awaitNotice(ctx, txn.ID())
		if err != nil {
			return err
		}
		t.emit(w.name, Told, "told: %s waits on my txn (its intent %s) — finishing %s first", n.From, short(n.Intent), s.ID)
	}
	d, err := w.commit(ctx, txn, intents.Apply("write_section").Set(path, text))
	if err != nil {
		return fmt.Errorf("team: %s: commit %s: %w", w.name, s.ID, err)
	}
	landed.arrive()
	if err := landed.wait(ctx); err != nil {
		return err
	}
	if len(d.MergedWith) > 0 {
		t.emit(w.name, Merged, "committed %s (rev %d); disjoint edits merged with %s", s.ID, d.Rev, t.namesOf(d.MergedWith))
	} else {
		t.emit(w.name, Committed, "committed %s (rev %d)", s.ID, d.Rev)
	}
	return nil
}

// demote is the editor demoting the target material once a writer's
// transaction reads it: the apply waits (on_conflict wait) until that
// transaction ends, and is then decided again and applied.
func (t *teamRun) demote(ctx context.Context, e *member, target *material, why string, open chan struct{}) (*intents.Decision, error) {
	if err := await(ctx, open); err != nil {
		return nil, err
	}
	path := fmt.Sprintf("materials.%s.status", target.ID)
	d, err := e.apply(ctx, intents.Apply("demote_material").
		Pre(fmt.Sprintf("state.%s == %q", path, "approved")).
		Set(path, "demoted").
		Wait(editorWait).
		Meta("reason", why))
	if err != nil {
		return nil, fmt.Errorf("team: editor: demote %s: %w", target.ID, err)
	}
	return d, nil
}

// clash is two writers rewriting the intro: a holds a transaction on it,
// b applies its own rewrite with on_conflict escalate, and the arbiter
// decides. Each is then told its final decision. It returns the writer
// whose rewrite stands.
func (t *teamRun) clash(ctx context.Context, a, b *member, o *outline) (string, error) {
	st, err := a.c.Read(ctx, "report.intro")
	if err != nil {
		return "", fmt.Errorf("team: %s: %w", a.name, err)
	}
	cur := st.Values["report.intro"]
	var draft string
	if err := cur.Decode(&draft); err != nil {
		return "", fmt.Errorf("team: %s: report.intro: %w", a.name, err)
	}
	titles := make([]string, len(o.sections))
	for i, s := range o.sections {
		titles[i] = s.Title
	}
	textA, err := complete(ctx, t.cfg.Models.Writer, introPrompt(a.name, Title, draft, titles))
	if err != nil {
		return "", fmt.Errorf("team: %s: %w", a.name, err)
	}
	// The propose shows its draft in meta: its writes carry no values, and
	// the arbiter weighs the two texts.
	a.nameNextTxn(fmt.Sprintf("%s's txn on the intro", a.name))
	txn, err := a.propose(ctx, intents.Propose("rewrite_intro").
		ReadAt("report.intro", cur.Version).
		Write("report.intro", intents.OpSet).
		Lease(lease).
		Meta("draft", textA))
	if err != nil {
		return "", fmt.Errorf("team: %s: rewrite the intro: %w", a.name, err)
	}
	preempted := a.expect(txn.Grant().Intent)
	t.emit(a.name, Opened, "opened a txn rewriting report.intro (granted)")

	textB, err := complete(ctx, t.cfg.Models.Writer, introPrompt(b.name, Title, draft, titles))
	if err != nil {
		return "", fmt.Errorf("team: %s: %w", b.name, err)
	}
	d, err := b.apply(ctx, intents.Apply("rewrite_intro").Set("report.intro", textB).Escalate())
	var rej *agents.RejectedError
	switch {
	case err == nil:
		t.emit(b.name, Told, "told: my rewrite of the intro was applied (rev %d) — the arbiter chose it", d.Rev)
		// The arbiter preempted a's transaction: its propose's final
		// decision is now aborted (which also ends the SDK's txn), and a
		// commit would be fenced.
		select {
		case p := <-preempted:
			t.emit(a.name, Told, "told: my txn on the intro was %s — %s", p.Outcome, p.Detail)
		case <-ctx.Done():
			return "", fmt.Errorf("team: %s: no word of the preemption: %w", a.name, context.Cause(ctx))
		}
		return b.name, nil
	case errors.As(err, &rej) && errors.Is(err, agents.ErrArbiterRejected):
		t.emit(b.name, Told, "told: my rewrite of the intro was rejected (arbiter_rejected) — %s", d.Detail)
		d, err := a.commit(ctx, txn, intents.Apply("rewrite_intro").Set("report.intro", textA))
		if err != nil {
			return "", fmt.Errorf("team: %s: commit the intro: %w", a.name, err)
		}
		t.emit(a.name, Told, "told: the arbiter kept my txn; committed my rewrite of the intro (rev %d)", d.Rev)
		return a.name, nil
	}
	return "", fmt.Errorf("team: %s: rewrite the intro: %w", b.name, err)
}

// report reads the final report and the materials it cites.
func (t *teamRun) report(ctx context.Context, m *member) (*Result, error) {
	st, err := m.c.Read(ctx, "report", "materials")
	if err != nil {
		return nil, fmt.Errorf("team: read the report: %w", err)
	}
	var rep struct {
		Title    string             `json:"title"`
		Intro    string             `json:"intro"`
		Sections map[string]section `json:"sections"`
	}
	var mats map[string]material
	if err := st.Values["report"].Decode(&rep); err != nil {
		return nil, fmt.Errorf("team: report: %w", err)
	}
	if err := st.Values["materials"].Decode(&mats); err != nil {
		return nil, fmt.Errorf("team: materials: %w", err)
	}
	if rep.Title == "" || len(rep.Sections) == 0 {
		return nil, errNoReport
	}
	res := &Result{Title: rep.Title, Intro: rep.Intro, Rev: st.Rev}
	for i := range len(rep.Sections) {
		id := fmt.Sprintf("s%d", i+1)
		s, ok := rep.Sections[id]
		if !ok {
			return nil, fmt.Errorf("team: report: no section %s", id)
		}
		src := mats[s.Cites]
		res.Sections = append(res.Sections, Section{ID: id, Title: s.Title, Owner: s.Owner, Text: s.Text,
			Cites: s.Cites, Source: src.Title, SourceStatus: src.Status})
	}
	res.Report = render(res)
	return res, nil
}

// render writes the report as text, its paragraphs wrapped.
func render(r *Result) string {
	var b strings.Builder
	b.WriteString(r.Title + "\n\n")
	b.WriteString("Introduction\n")
	wrap(&b, r.Intro, "    ", 88)
	for i, s := range r.Sections {
		fmt.Fprintf(&b, "\n%d. %s\n", i+1, s.Title)
		wrap(&b, s.Text, "    ", 88)
		fmt.Fprintf(&b, "    [source %s: %q, %s]\n", s.Cites, s.Source, s.SourceStatus)
	}
	return b.String()
}

func wrap(b *strings.Builder, text, indent string, width int) {
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
}

// PublishRules hold the report's publication for the editor's approval:
// the board rules a run's publish step is meant for.
const PublishRules = `{"pattern":"report.published","approve":{"by":["editor"],"timeout":"30m"}}`

// publish has writer ask to publish the report read at res.Rev, which the
// board's rules hold for the editor's approval (PublishRules): the
// editor's program approves a report whose every section cites a source
// still in force, unless Config.Approve leaves it to a person. It returns
// the revision of the publication.
func (t *teamRun) publish(ctx context.Context, writer, editor *member, res *Result) (uint64, error) {
	if !t.cfg.Approve {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			editor.c.RunApprover(actx, func(_ context.Context, c *intents.Escalation) (string, string, error) {
				// A source demoted after a section cited it is noted with
				// the approval, not a reason to hold the report back: the
				// section was written from it while it stood.
				var notes []string
				for _, s := range res.Sections {
					if s.SourceStatus != "approved" {
						notes = append(notes, fmt.Sprintf("section %s cites %s, %s since", s.ID, s.Cites, s.SourceStatus))
					}
				}
				why := fmt.Sprintf("the %d sections are written and cited", len(res.Sections))
				if len(notes) > 0 {
					why += "; " + strings.Join(notes, "; ")
				}
				t.emit(editor.name, Approved, "approves publishing the report (case %s): %s", short(c.ID), why)
				return intents.VerdictApprove, why, nil
			})
		}()
	}
	d, err := writer.apply(ctx, intents.Apply("publish").Set("report.published", map[string]any{"rev": res.Rev, "by": writer.name}))
	if err != nil {
		return 0, fmt.Errorf("team: %s: publish the report: %w", writer.name, err)
	}
	t.emit(writer.name, Published, "published the report read at rev %d, at rev %d", res.Rev, d.Rev)
	return d.Rev, nil
}
