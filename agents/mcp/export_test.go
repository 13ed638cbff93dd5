package mcp

import "github.com/coagent/coagent/intents"

// Advice is what a model is told to do after a rejection for reason r.
func Advice(r intents.Reason) string { return advice(r, nil) }
