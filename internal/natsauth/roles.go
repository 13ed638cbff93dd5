package natsauth

import "github.com/coagent/coagent/coordinator/rules"

// MergeRoles merges roles (Registry.Roles) into the agents of a board
// rules file, so that the registry gives agents their roles as well as the
// file does; see rules.MergeRoles, which the coordinator also applies to a
// file put in force through rules.set (coordinator.Options.Roles).
func MergeRoles(file []byte, roles map[string][]string) ([]byte, error) {
	return rules.MergeRoles(file, roles)
}
