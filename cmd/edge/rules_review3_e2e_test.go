package main

import (
	"path"
	"strings"
	"testing"
)

// TestE2EBypassRuleEvadedByCaseOnACaseInsensitiveOrigin: a real edge
// process with the rules of TestE2EBypassRuleEvadedBySpellingsOfItsPath
// in front of an origin that routes case-insensitively, as Express (by
// default), ASP.NET Core and IIS do. A victim who follows a link to
// /API/me gets their API answer stored; the next user is served it (by
// the HTTP/1.1 hit path).
func TestE2EBypassRuleEvadedByCaseOnACaseInsensitiveOrigin(t *testing.T) {
	apiBypassHolds(t, func(p string) string { return strings.ToLower(path.Clean("/" + p)) }, "/api/me", "/API/me", "/Api/Me")
}
