package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Peer requests carry these fields. A client can never set them: the public
// handler strips every Edge-* field, and the peer listener rejects a request
// whose signature does not verify.
const (
	hdrNode   = "Edge-Node"   // sender node id
	hdrTime   = "Edge-Time"   // sender clock, Unix ns
	hdrAuth   = "Edge-Auth"   // hex HMAC-SHA256 over the fields below
	hdrMode   = "Edge-Mode"   // "probe" or "climb"
	hdrPath   = "Edge-Path"   // remaining climb path, comma-separated node ids
	hdrRank   = "Edge-Rank"   // tree rank the receiver plays
	hdrHop    = "Edge-Hop"    // hops so far (loop guard)
	hdrOrigin = "Edge-Origin" // "1": the receiver fetches from the origin itself
)

// maxSkew bounds the clock difference accepted on a signed peer request.
const maxSkew = 5 * time.Second

func signature(secret []byte, r *http.Request) string {
	m := hmac.New(sha256.New, secret)
	for _, s := range []string{r.Header.Get(hdrNode), r.Header.Get(hdrTime), r.Method, r.Host, r.URL.RequestURI(),
		r.Header.Get(hdrMode), r.Header.Get(hdrPath), r.Header.Get(hdrRank), r.Header.Get(hdrHop), r.Header.Get(hdrOrigin)} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// sign stamps an outgoing peer request.
func sign(secret []byte, node string, r *http.Request) {
	r.Header.Set(hdrNode, node)
	r.Header.Set(hdrTime, strconv.FormatInt(time.Now().UnixNano(), 10))
	r.Header.Set(hdrAuth, signature(secret, r))
}

// verify checks an incoming peer request; reason is "" when it is valid.
func verify(secret []byte, r *http.Request, now time.Time) (reason string) {
	if r.Header.Get(hdrAuth) == "" || r.Header.Get(hdrNode) == "" {
		return "unsigned"
	}
	ts, err := strconv.ParseInt(r.Header.Get(hdrTime), 10, 64)
	if err != nil {
		return "malformed"
	}
	if d := now.Sub(time.Unix(0, ts)); d > maxSkew || d < -maxSkew {
		return "skew"
	}
	if !hmac.Equal([]byte(signature(secret, r)), []byte(strings.ToLower(r.Header.Get(hdrAuth)))) {
		return "mac"
	}
	return ""
}
