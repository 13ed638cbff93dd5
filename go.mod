module github.com/coagent/coagent

go 1.26

require (
	github.com/expr-lang/expr v1.17.8
	github.com/oklog/ulid/v2 v2.1.2
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2
)

require golang.org/x/text v0.14.0 // indirect
