package coding

import "strings"

// Types matches media types worth compressing. An entry is an exact type
// (text/html), a type with any subtype (text/*), or a structured-syntax
// suffix (+json, +xml) matching any subtype that ends with it.
type Types struct {
	exact    map[string]bool
	prefixes []string // "text/"
	suffixes []string // "+json"
}

// DefaultTypes are the media types compressed by default: text, scripts,
// data formats, SVG, WebAssembly and uncompressed fonts. Images, video,
// archives and woff/woff2 are already compressed.
var DefaultTypes = []string{
	"text/*", "application/javascript", "application/x-javascript", "application/ecmascript",
	"application/json", "application/xml", "application/xhtml+xml", "application/rss+xml",
	"application/atom+xml", "application/manifest+json", "application/ld+json", "application/wasm",
	"application/x-ndjson", "application/vnd.ms-fontobject", "image/svg+xml", "image/x-icon",
	"image/vnd.microsoft.icon", "image/bmp", "font/ttf", "font/otf", "font/collection", "+json", "+xml",
}

// NewTypes builds a matcher; it returns the first malformed entry.
func NewTypes(list []string) (Types, string) {
	t := Types{exact: map[string]bool{}}
	for _, raw := range list {
		s := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case strings.HasPrefix(s, "+") && len(s) > 1 && !strings.ContainsAny(s, "/ ;*"):
			t.suffixes = append(t.suffixes, s)
		case strings.HasSuffix(s, "/*") && len(s) > 2 && !strings.ContainsAny(s[:len(s)-2], "/ ;*+"):
			t.prefixes = append(t.prefixes, s[:len(s)-1])
		case strings.Count(s, "/") == 1 && !strings.ContainsAny(s, " ;*") && !strings.HasPrefix(s, "/") && !strings.HasSuffix(s, "/"):
			t.exact[s] = true
		default:
			return Types{}, raw
		}
	}
	return t, ""
}

// Match reports whether a Content-Type field value names a listed type
// (parameters such as charset are ignored).
func (t Types) Match(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	if mt == "" {
		return false
	}
	if hasUpper(mt) {
		mt = strings.ToLower(mt)
	}
	if t.exact[mt] {
		return true
	}
	for _, p := range t.prefixes {
		if strings.HasPrefix(mt, p) {
			return true
		}
	}
	for _, s := range t.suffixes {
		if strings.HasSuffix(mt, s) {
			return true
		}
	}
	return false
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}
