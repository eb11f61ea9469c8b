package proxy

import (
	"net/http"

	"github.com/dunglas/httpsfv"
)

// parseTargeted parses a targeted cache-control field (RFC 9213) such as
// CDN-Cache-Control. Its syntax is a Structured Field Dictionary (RFC
// 8941/9651), not Cache-Control's: max-age=60 is an Integer, no-store a
// Boolean. RFC 9213 §2.1: a field that fails to parse, or whose known
// directives have values of the wrong type, is ignored whole, and
// Cache-Control applies. ok is false then (or when the field is absent or
// empty). The library is github.com/dunglas/httpsfv, the Structured Field
// parser Caddy's ecosystem and Mercure use.
func parseTargeted(h http.Header, name string) (cc CacheControl, ok bool) {
	lines := h.Values(name)
	if len(lines) == 0 {
		return cc, false
	}
	d, err := httpsfv.UnmarshalDictionary(lines)
	if err != nil || len(d.Names()) == 0 {
		return cc, false
	}
	cc = CacheControl{MaxAge: unset, SMaxAge: unset, MaxStale: unset, MinFresh: unset, StaleWhile: unset, StaleIfError: unset, Present: true}
	for _, key := range d.Names() {
		member, _ := d.Get(key)
		item, isItem := member.(httpsfv.Item)
		switch key {
		case "max-age", "s-maxage", "stale-while-revalidate", "stale-if-error":
			n, isInt := item.Value.(int64)
			if !isItem || !isInt || n < 0 {
				return cc, false
			}
			if n > maxDeltaSeconds {
				n = maxDeltaSeconds
			}
			switch key {
			case "max-age":
				cc.MaxAge = int(n)
			case "s-maxage":
				cc.SMaxAge = int(n)
			case "stale-while-revalidate":
				cc.StaleWhile = int(n)
			default:
				cc.StaleIfError = int(n)
			}
		case "no-store", "public", "must-revalidate", "proxy-revalidate", "immutable", "must-understand", "no-transform":
			b, isBool := item.Value.(bool)
			if !isItem || !isBool {
				return cc, false
			}
			if b { // ?0: the directive is off
				cc.setFlag(key)
			}
		case "no-cache", "private":
			// Unqualified (a Boolean) or naming fields (a String or an
			// Inner List of Strings).
			qualified := false
			switch v := member.(type) {
			case httpsfv.Item:
				switch x := v.Value.(type) {
				case bool:
					if !x {
						continue
					}
				case string:
					qualified = true
				default:
					return cc, false
				}
			case httpsfv.InnerList:
				qualified = true
			}
			cc.setQualifiable(key, qualified)
		}
	}
	return cc, true
}
