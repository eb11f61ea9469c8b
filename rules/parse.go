package rules

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/edgecache/edge/internal/didyoumean"
)

// Error is a rule that cannot be used: Key names the rule and its field
// as the config file spells them (sites[0].rules[2].ttl).
type Error struct {
	Key    string
	Value  any
	Reason string
}

func (e *Error) Error() string {
	if e.Value != nil {
		return fmt.Sprintf("%s: %v %s", e.Key, e.Value, e.Reason)
	}
	return e.Key + ": " + e.Reason
}

// MaxRules bounds a site's list: rules are scanned in order per request,
// and each rule is a label value of the per-rule metrics.
const MaxRules = 200

// protectedResponseFields are fields a response edit may not touch: the
// cache decides from them what it may store and share, and what the body
// is, so an edit of one could turn a private answer into a shared one or
// describe a body wrongly. The cache's own lifetime is set with ttl and
// default_ttl; Set-Cookie goes with strip_cookies, explicitly.
var protectedResponseFields = []string{
	"Cache-Control", "Expires", "Pragma", "Set-Cookie", "Vary", "Age", "Date", "Etag", "Last-Modified",
	"Content-Length", "Content-Encoding", "Content-Range", "Transfer-Encoding", "Connection", "Trailer",
	"Cdn-Cache-Control", "Edge-Cache-Control", "Surrogate-Control", "Cache-Status", "Via", "Accept-Ranges",
}

// protectedRequestFields are request fields an edit may not touch: the
// framing of the request and its route.
var protectedRequestFields = append([]string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Upgrade", "Trailer"},
	clientSelectingFields...)

// clientSelectingFields are request fields the edge answers the client
// by: it negotiates the coding, serves the range and answers the
// conditional from what the client sent, and reads the client's
// directives, all on the request a rule's edits change. An edit meant
// for the origin (nginx's proxy_set_header Accept-Encoding gzip) would
// reach the client too: a client that accepts no coding was sent gzip
// (a review's test).
var clientSelectingFields = []string{"Accept-Encoding", "Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since",
	"If-Unmodified-Since", "Cache-Control", "Pragma"}

// ruleKeys are the keys a rule may have, for the error that names an
// unknown one.
var ruleKeys = []string{"name", "match", "bypass", "default_ttl", "ttl", "min_ttl", "max_ttl",
	"stale_while_revalidate", "stale_if_error", "key", "request_headers", "response_headers",
	"strip_cookies", "client_no_cache", "revalidate_interval", "browser_ttl"}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// Parse compiles a site's rules from their YAML value (a list of maps, as
// the YAML decoder gives it). at is the list's key in the config file.
// Every error names the rule and the field.
func Parse(at string, raw any) (*Set, error) {
	var list []any
	switch x := raw.(type) {
	case nil:
		return nil, nil
	case string:
		if strings.TrimSpace(x) == "" {
			return nil, nil // the key's default: no rules
		}
		return nil, &Error{Key: at, Value: x, Reason: "is a YAML list of rules, not a string"}
	case []any:
		list = x
	default:
		return nil, &Error{Key: at, Value: raw, Reason: "is not a list of rules"}
	}
	if len(list) > MaxRules {
		return nil, &Error{Key: at, Reason: fmt.Sprintf("has %d rules; at most %d", len(list), MaxRules)}
	}
	s := &Set{at: at, ambiguous: &Rule{Name: AmbiguousPathRule, Index: -1, Bypass: true, Lifetime: NoLifetime}}
	names := map[string]bool{}
	// Every rule is checked, so that one run names each wrong one (the
	// first error of a rule ends that rule).
	var errs Errors
	for i, item := range list {
		key := fmt.Sprintf("%s[%d]", at, i)
		m, ok := item.(map[string]any)
		if !ok {
			errs = append(errs, &Error{Key: key, Value: item, Reason: "is not a rule ({name, match, …})"})
			continue
		}
		r, err := parseRule(key, m)
		if err != nil {
			var re *Error
			if !errors.As(err, &re) {
				re = &Error{Key: key, Reason: err.Error()}
			}
			errs = append(errs, re)
			continue
		}
		if names[r.Name] {
			errs = append(errs, &Error{Key: key + ".name", Value: r.Name, Reason: "names two rules"})
			continue
		}
		names[r.Name] = true
		r.Index = i
		if r.cookie != "" && !r.ResponseOnly() {
			s.needsHeader = true
		}
		// A regular expression may match capitals however it is written
		// ([[:upper:]], \x41): its parsed form says (caseClosed).
		if hasUpper(r.prefix) || hasUpper(r.glob) || r.reCaseSensitive {
			s.hasUpperPattern = true
		}
		r.caseFree = r.re == nil && !hasLetter(r.prefix) && !hasLetter(r.glob)
		if keepsApart(r) || !r.Query.Empty() {
			s.foldMatters = true
		}
		if r.cookie != "" && r.Lifetime.Sets() {
			s.cookieLifetimes = true
		}
		if r.BrowserTTLSet {
			s.browserTTL = true
			s.browserTTLCookie = s.browserTTLCookie || r.cookie != ""
		}
		s.Rules = append(s.Rules, r)
	}
	switch len(errs) {
	case 0:
		return s, nil
	case 1:
		return nil, errs[0]
	}
	return nil, errs
}

// Errors are the errors of several rules, in order.
type Errors []*Error

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, err := range e {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "; ")
}

// Unwrap gives errors.As each rule's error.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, err := range e {
		out[i] = err
	}
	return out
}

func parseRule(at string, m map[string]any) (*Rule, error) {
	r := &Rule{Lifetime: NoLifetime, prefix: "/", prefixFold: "/"}
	for k := range m {
		if !slices.Contains(ruleKeys, k) {
			return nil, &Error{Key: at + "." + k, Reason: "is not a key of a rule (" + strings.Join(ruleKeys, ", ") + ")" + didyoumean.Suggest(k, ruleKeys)}
		}
	}
	name, ok := m["name"].(string)
	if !ok || !nameRE.MatchString(name) {
		return nil, &Error{Key: at + ".name", Value: m["name"], Reason: "is required: lower-case letters, digits, _ . - (at most 64); it labels the rule's metrics"}
	}
	r.Name = name
	if err := r.parseMatch(at+".match", m["match"]); err != nil {
		return nil, err
	}
	var err error
	if r.Bypass, err = boolOf(at+".bypass", m["bypass"]); err != nil {
		return nil, err
	}
	if r.StripCookies, err = boolOf(at+".strip_cookies", m["strip_cookies"]); err != nil {
		return nil, err
	}
	lt := &r.Lifetime
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"default_ttl", &lt.Default}, {"ttl", &lt.TTL}, {"min_ttl", &lt.Min}, {"max_ttl", &lt.Max},
		{"stale_while_revalidate", &lt.SWR}, {"stale_if_error", &lt.SIE}} {
		if v, ok := m[f.key]; ok {
			if *f.dst, err = durationOf(at+"."+f.key, v); err != nil {
				return nil, err
			}
		}
	}
	if v, ok := m["browser_ttl"]; ok {
		if r.BrowserTTL, err = durationOf(at+".browser_ttl", v); err != nil {
			return nil, err
		}
		r.BrowserTTLSet = true
		if r.Bypass {
			return nil, &Error{Key: at + ".browser_ttl", Reason: "and bypass exclude each other: a bypassed request's answer is the origin's, Cache-Control included"}
		}
	}
	switch {
	case lt.TTL != Unset && lt.Default != Unset:
		return nil, &Error{Key: at + ".default_ttl", Reason: "and ttl exclude each other: ttl replaces every lifetime, default_ttl only a missing one"}
	case lt.Min != Unset && lt.Max != Unset && lt.Min > lt.Max:
		return nil, &Error{Key: at + ".min_ttl", Value: lt.Min, Reason: "is above max_ttl " + lt.Max.String()}
	case r.Bypass && lt.Sets():
		return nil, &Error{Key: at + ".bypass", Reason: "and lifetime fields exclude each other: a bypassed response is not stored"}
	}
	if r.ResponseOnly() {
		lt.statuses = r.statuses
	}
	if v, ok := m["key"]; ok {
		if err := r.parseKey(at+".key", v); err != nil {
			return nil, err
		}
	}
	if r.Request, err = headerEdit(at+".request_headers", m["request_headers"], protectedRequestFields); err != nil {
		return nil, err
	}
	if err := checkForwardedProto(at+".request_headers", r.Request); err != nil {
		return nil, err
	}
	if r.Response, err = headerEdit(at+".response_headers", m["response_headers"], protectedResponseFields); err != nil {
		return nil, err
	}
	if v, ok := m["client_no_cache"]; ok {
		s, _ := v.(string)
		mode, perr := ParseClientNoCache(s)
		if perr != nil {
			return nil, &Error{Key: at + ".client_no_cache", Value: v, Reason: perr.Error()}
		}
		r.ClientNoCache, r.ClientNoCacheSet = mode, true
	}
	if v, ok := m["revalidate_interval"]; ok {
		if r.RevalidateInterval, err = durationOf(at+".revalidate_interval", v); err != nil {
			return nil, err
		}
		if r.RevalidateInterval <= 0 || r.ClientNoCache != Coalesce {
			return nil, &Error{Key: at + ".revalidate_interval", Value: v, Reason: "must be above 0 and goes with client_no_cache: coalesce"}
		}
	}
	if r.StripCookies && len(r.KeyCookies) > 0 {
		return nil, &Error{Key: at + ".key.cookies", Reason: "and strip_cookies exclude each other: the cookies are removed before the key is made, so the key would never see them"}
	}
	if r.cookie != "" && (!r.Query.Empty() || r.KeyedOnRequest()) {
		return nil, &Error{Key: at + ".key", Reason: "cannot be set by a rule that matches on a cookie: a URL's key must not depend on whether a request carries a cookie (a purge of the URL could not find it)"}
	}
	if r.ResponseOnly() {
		// The status is known only once the origin has answered: fields
		// that act before (the key, bypass, the forwarded request) cannot
		// depend on it.
		for _, f := range []struct {
			key string
			set bool
		}{{"bypass", r.Bypass}, {"key", !r.Query.Empty() || r.KeyedOnRequest()}, {"request_headers", !r.Request.Empty()},
			{"strip_cookies", r.StripCookies}, {"client_no_cache", r.ClientNoCacheSet}} {
			if f.set {
				return nil, &Error{Key: at + "." + f.key, Reason: "acts before the origin answers, so a rule that matches on status cannot set it"}
			}
		}
	}
	return r, nil
}

var matchKeys = []string{"path", "path_regex", "methods", "status", "cookie"}

func (r *Rule) parseMatch(at string, v any) error {
	if v == nil {
		return nil // every request
	}
	m, ok := v.(map[string]any)
	if !ok {
		return &Error{Key: at, Value: v, Reason: "is not {path | path_regex, methods, status, cookie}"}
	}
	for k := range m {
		if !slices.Contains(matchKeys, k) {
			return &Error{Key: at + "." + k, Reason: "is not a key of match (" + strings.Join(matchKeys, ", ") + ")" + didyoumean.Suggest(k, matchKeys)}
		}
	}
	_, hasPath := m["path"]
	_, hasRE := m["path_regex"]
	if hasPath && hasRE {
		return &Error{Key: at + ".path_regex", Reason: "and path exclude each other"}
	}
	if hasPath {
		p, ok := m["path"].(string)
		if !ok || p == "" || (p[0] != '/' && p[0] != '*') {
			return &Error{Key: at + ".path", Value: m["path"], Reason: "must start with / (a prefix) or * (a glob): /static/, *.css, /img/*.png"}
		}
		if strings.Contains(p, "?") && strings.Contains(p, "=") {
			return &Error{Key: at + ".path", Value: p, Reason: "spells a query: rules match the path alone (? is a one-byte glob); match the path (/index.php) and key or bypass on what it needs"}
		}
		if strings.ContainsAny(p, "*?") {
			r.glob, r.globFold = p, foldPath(p)
		} else {
			r.prefix, r.prefixFold = p, foldPath(p)
		}
	}
	if hasRE {
		p, ok := m["path_regex"].(string)
		if !ok || p == "" || len(p) > 1024 {
			return &Error{Key: at + ".path_regex", Value: m["path_regex"], Reason: "is not a regular expression of at most 1024 bytes"}
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return &Error{Key: at + ".path_regex", Value: p, Reason: "does not compile: " + err.Error()}
		}
		r.re = re
		closed, sensitive, err := caseClosed(p)
		if err != nil {
			return &Error{Key: at + ".path_regex", Value: p, Reason: "cannot be read in every case: " + err.Error()}
		}
		r.reFold, r.reCaseSensitive = closed, sensitive
		r.reLit, _ = re.LiteralPrefix()
		if rest, ok := strings.CutPrefix(p, "^"); ok && !strings.ContainsAny(rest, "(|") {
			// Anchored: the literal that begins the rest begins the path.
			if tail, err := regexp.Compile(rest); err == nil {
				r.reLit, _ = tail.LiteralPrefix()
				r.reAnchored = true
			}
		}
		r.reLitFold = foldPath(r.reLit)
	}
	if v, ok := m["methods"]; ok {
		l, err := stringList(at+".methods", v)
		if err != nil {
			return err
		}
		for i, meth := range l {
			meth = strings.ToUpper(meth)
			if !httpguts.ValidHeaderFieldName(meth) { // a method is a token
				return &Error{Key: fmt.Sprintf("%s.methods[%d]", at, i), Value: l[i], Reason: "is not a method"}
			}
			r.methods = append(r.methods, meth)
		}
	}
	if v, ok := m["status"]; ok {
		l, ok := v.([]any)
		if !ok {
			l = []any{v}
		}
		for i, s := range l {
			n, ok := s.(int)
			if !ok || n < 100 || n > 599 {
				return &Error{Key: fmt.Sprintf("%s.status[%d]", at, i), Value: s, Reason: "is not a status code (100–599)"}
			}
			r.statuses = append(r.statuses, n)
		}
		if len(r.statuses) == 0 {
			return &Error{Key: at + ".status", Reason: "is an empty list"}
		}
	}
	if v, ok := m["cookie"]; ok {
		c, ok := v.(string)
		if !ok || c == "" || strings.ContainsAny(c, "=; ,") {
			return &Error{Key: at + ".cookie", Value: v, Reason: "is not a cookie name (a trailing * makes a prefix)"}
		}
		r.cookie = c
	}
	return nil
}

var keyKeys = []string{"ignore_params", "allow_params", "sort_params", "headers", "cookies", "device"}

func (r *Rule) parseKey(at string, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return &Error{Key: at, Value: v, Reason: "is not {ignore_params, allow_params, sort_params, headers, cookies, device}"}
	}
	var err error
	for k, val := range m {
		switch k {
		case "ignore_params", "allow_params", "cookies":
			l, err := stringList(at+"."+k, val)
			if err != nil {
				return err
			}
			for i, n := range l {
				if n == "" || strings.ContainsAny(n, "&=; ") {
					return &Error{Key: fmt.Sprintf("%s.%s[%d]", at, k, i), Value: n, Reason: "is not a name (a trailing * makes a prefix; * alone is every name)"}
				}
			}
			if len(l) == 0 {
				return &Error{Key: at + "." + k, Reason: `is empty (to keep no query parameter in the key: ignore_params: ["*"])`}
			}
			switch k {
			case "ignore_params":
				r.Query.Ignore = l
			case "allow_params":
				r.Query.Allow = l
			default:
				r.KeyCookies = l
			}
		case "headers":
			l, err := stringList(at+".headers", val)
			if err != nil {
				return err
			}
			for i, n := range l {
				if !httpguts.ValidHeaderFieldName(n) {
					return &Error{Key: fmt.Sprintf("%s.headers[%d]", at, i), Value: n, Reason: "is not a header field name"}
				}
				r.KeyHeaders = append(r.KeyHeaders, http.CanonicalHeaderKey(n))
			}
			sort.Strings(r.KeyHeaders)
		case "sort_params":
			if r.Query.Sort, err = boolOf(at+".sort_params", val); err != nil {
				return err
			}
		case "device":
			if r.KeyDevice, err = boolOf(at+".device", val); err != nil {
				return err
			}
		default:
			return &Error{Key: at + "." + k, Reason: "is not a key of key (" + strings.Join(keyKeys, ", ") + ")" + didyoumean.Suggest(k, keyKeys)}
		}
	}
	return nil
}

func headerEdit(at string, v any, protected []string) (HeaderEdit, error) {
	var e HeaderEdit
	if v == nil {
		return e, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return e, &Error{Key: at, Value: v, Reason: "is not {set: {name: value}, remove: [names]}"}
	}
	check := func(key, name string) (string, error) {
		if !httpguts.ValidHeaderFieldName(name) {
			return "", &Error{Key: key, Value: name, Reason: "is not a header field name"}
		}
		c := http.CanonicalHeaderKey(name)
		if slices.Contains(protected, c) {
			if slices.Contains(clientSelectingFields, c) {
				return "", &Error{Key: key, Value: name, Reason: "may not be edited by a rule: the edge answers the client by it (the coding, the range, the conditional, the client's directives), so an edit meant for the origin would reach the client too; the edge asks the origin for what it needs itself"}
			}
			return "", &Error{Key: key, Value: name, Reason: "may not be edited by a rule: the cache reads it to decide what it may store and share, or how the message is framed (use ttl, default_ttl or strip_cookies)"}
		}
		return c, nil
	}
	for k, val := range m {
		switch k {
		case "set":
			sm, ok := val.(map[string]any)
			if !ok {
				return e, &Error{Key: at + ".set", Value: val, Reason: "is not a map of field name to value"}
			}
			names := make([]string, 0, len(sm))
			for n := range sm {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				c, err := check(at+".set."+n, n)
				if err != nil {
					return e, err
				}
				var val string
				switch x := sm[n].(type) {
				case string:
					val = x
				case int, float64, bool:
					val = fmt.Sprint(x)
				default:
					return e, &Error{Key: at + ".set." + n, Value: sm[n], Reason: "is not a field value (a string)"}
				}
				if !httpguts.ValidHeaderFieldValue(val) {
					return e, &Error{Key: at + ".set." + n, Value: val, Reason: "is not a valid field value"}
				}
				e.Set = append(e.Set, [2]string{c, val})
			}
		case "remove":
			l, err := stringList(at+".remove", val)
			if err != nil {
				return e, err
			}
			for i, n := range l {
				c, err := check(fmt.Sprintf("%s.remove[%d]", at, i), n)
				if err != nil {
					return e, err
				}
				e.Remove = append(e.Remove, c)
			}
		default:
			return e, &Error{Key: at + "." + k, Reason: "is not set or remove"}
		}
	}
	return e, nil
}

// checkForwardedProto refuses a request edit of X-Forwarded-Proto other
// than setting http or https: the edge keys and judges a request by the
// scheme a rule sets there, and tells the origin that scheme. Removed, a
// peer's relayed request lost the scheme its ingress had read (a
// review's TestS72RuleRemovingForwardedProtoMisreadsEveryRelayedRequest).
func checkForwardedProto(at string, e HeaderEdit) error {
	const name = "X-Forwarded-Proto"
	if slices.Contains(e.Remove, name) {
		return &Error{Key: at + ".remove", Value: name, Reason: "may not be removed by a rule: the edge tells the origin in it the scheme it keys the request by (a rule may set it to http or https)"}
	}
	if v, ok := e.Value(name); ok && !strings.EqualFold(v, "http") && !strings.EqualFold(v, "https") {
		return &Error{Key: at + ".set." + name, Value: v, Reason: "is not http or https: the edge keys the request by the scheme a rule sets here"}
	}
	return nil
}

func boolOf(key string, v any) (bool, error) {
	if v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, &Error{Key: key, Value: v, Reason: "is not true or false"}
	}
	return b, nil
}

// durationOf reads a duration: a Go duration (90s, 1h30m), a number of
// days (7d) or a whole number of seconds.
func durationOf(key string, v any) (time.Duration, error) {
	const most = 365 * 24 * time.Hour
	bad := &Error{Key: key, Value: v, Reason: "is not a duration (90s, 10m, 1h, 7d)"}
	outOfRange := &Error{Key: key, Value: v, Reason: "must be between 0 and 365d"}
	// Counts are checked before they are multiplied, so that no count
	// wraps around into the range.
	scaled := func(n int, unit time.Duration) (time.Duration, error) {
		if n < 0 || n > int(most/unit) {
			return 0, outOfRange
		}
		return time.Duration(n) * unit, nil
	}
	var d time.Duration
	switch x := v.(type) {
	case int:
		return scaled(x, time.Second)
	case string:
		s := strings.TrimSpace(x)
		if n, ok := strings.CutSuffix(s, "d"); ok {
			days, err := strconv.Atoi(n)
			if err != nil {
				return 0, bad
			}
			return scaled(days, 24*time.Hour)
		}
		if n, err := strconv.Atoi(s); err == nil {
			return scaled(n, time.Second)
		}
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, bad
		}
	default:
		return 0, bad
	}
	if d < 0 || d > most {
		return 0, outOfRange
	}
	return d, nil
}

func stringList(key string, v any) ([]string, error) {
	l, ok := v.([]any)
	if !ok {
		if s, ok := v.(string); ok {
			return nil, &Error{Key: key, Value: s, Reason: "is a YAML list ([a, b]), not a string"}
		}
		return nil, &Error{Key: key, Value: v, Reason: "is not a list"}
	}
	out := make([]string, 0, len(l))
	for i, x := range l {
		s, ok := x.(string)
		if !ok || strings.TrimSpace(s) == "" {
			return nil, &Error{Key: fmt.Sprintf("%s[%d]", key, i), Value: x, Reason: "is not a non-empty string"}
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out, nil
}
