// Package cachestatus reads Cache-Status field values (RFC 9211) for the
// tools that classify answers (the access log, `edge load`): a value is a
// list of members, one per cache on the path, the one nearest the client
// last.
package cachestatus

import "strings"

// Last returns the member of the cache nearest the client: the last of
// the list ("edge-2; hit, edge-1; fwd=uri-miss" gives "edge-1;
// fwd=uri-miss"). Edge writes no quoted parameter with a comma in it, so
// a comma followed by a space separates members.
func Last(v string) string {
	if i := strings.LastIndex(v, ", "); i >= 0 {
		return v[i+2:]
	}
	return v
}
