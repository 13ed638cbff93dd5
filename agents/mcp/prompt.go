package mcp

import (
	"context"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// instructions is what the server tells a host about itself at
// initialization, for the model's system prompt.
func instructions(agent string, arbiter, approver bool) string {
	s := fmt.Sprintf("You are agent %s on a shared board coordinated by CoAgent. Other agents work on the same state at the same time. "+
		"Never assume the state: read it. Claim a task before working on it; write with expect (the versions you read) or pre conditions; "+
		"use begin/commit for work of several steps. A rejected request wrote nothing: follow its next.", agent)
	if arbiter {
		s += " You are also an arbiter: next_case gives you conflicts to settle with resolve."
	}
	if approver {
		s += " You are also an approver: approvals lists the intents waiting for one; approve or deny them, with why."
	}
	return s
}

// boardPrompt is the prompt "shared_board".
const boardPrompt = `You work on a shared board with other agents, through CoAgent. The board is one JSON tree of paths (tasks.t1.status); every path has a version that grows with each change.

1. Look before you act: read the paths you need (or the resource coagent://state/<path>). Keep the versions.
2. Take work with claim(path): exactly one of the agents claiming a task wins. If you lose, held_by says who has it: pick another task, do not work on it.
3. Change the state with write. Pass expect [{path, version}] with the versions you read, or a pre condition (state.tasks.t1.status == "open"), so you never overwrite a change you did not see.
4. For work of several steps, begin a transaction naming the paths you will write, do the work, then commit the values (or abort). Nobody else writes those paths meanwhile; the lease is kept alive for you while this session lasts.
5. A rejected request wrote nothing. Read reason, detail and next, and do what next says: stale_read, read again and redo; conflict, do something else or wait (on_conflict "wait"); precondition_failed, the state is not what you assumed.
6. When done, write the result and release(path) the task, with set {"status": "DONE"} to mark it done in the same write. history shows who changed what and what happened to your own requests.`

func (s *Server) addPrompt() {
	s.mcp.AddPrompt(&sdk.Prompt{Name: "shared_board", Title: "How to work on a shared board with CoAgent",
		Description: "Short instructions for a model working with other agents on the shared state through these tools."},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Description: "How to work on a shared board with CoAgent",
				Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: fmt.Sprintf("You are agent %s.\n\n%s", s.c.Name(), boardPrompt)}}}}, nil
		})
}
