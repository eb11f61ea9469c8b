package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/crypto/ocsp"
)

// OCSP stapling for certificate files. certmagic staples the certificates
// it manages (ACME); files are stapled here with golang.org/x/crypto/ocsp:
// a certificate whose leaf names a responder (and whose file holds the
// issuer after it) gets a fresh "good" response attached, refreshed half
// way to its NextUpdate. A responder that fails or answers anything but
// "good" leaves the certificate unstapled (clients then ask the responder
// themselves, or soft-fail), and is retried on the next pass.

// ocspTimeout bounds a responder's answer: it must not stall the refresh.
const ocspTimeout = 10 * time.Second

// stapleDue reports whether c needs a (new) staple at now.
func stapleDue(c *tls.Certificate, now time.Time) bool {
	if c.Leaf == nil || len(c.Leaf.OCSPServer) == 0 || len(c.Certificate) < 2 {
		return false
	}
	if len(c.OCSPStaple) == 0 {
		return true
	}
	r, err := ocsp.ParseResponse(c.OCSPStaple, nil)
	if err != nil || r.NextUpdate.IsZero() {
		return true
	}
	return now.After(r.ThisUpdate.Add(r.NextUpdate.Sub(r.ThisUpdate) / 2))
}

// fetchStaple asks the leaf's first responder about it.
func fetchStaple(ctx context.Context, client *http.Client, c *tls.Certificate) ([]byte, error) {
	issuer, err := x509.ParseCertificate(c.Certificate[1])
	if err != nil {
		return nil, fmt.Errorf("ocsp: issuer: %w", err)
	}
	req, err := ocsp.CreateRequest(c.Leaf, issuer, nil)
	if err != nil {
		return nil, fmt.Errorf("ocsp: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ocspTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Leaf.OCSPServer[0], bytes.NewReader(req))
	if err != nil {
		return nil, fmt.Errorf("ocsp: %w", err)
	}
	hr.Header.Set("Content-Type", "application/ocsp-request")
	resp, err := client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("ocsp: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ocsp: responder answered %d", resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("ocsp: %w", err)
	}
	r, err := ocsp.ParseResponseForCert(raw, c.Leaf, issuer)
	if err != nil {
		return nil, fmt.Errorf("ocsp: %w", err)
	}
	if r.Status != ocsp.Good {
		return nil, fmt.Errorf("ocsp: status %d, not good", r.Status)
	}
	return raw, nil
}

// staple refreshes the staples that are due and swaps in a new set holding
// copies of the stapled certificates (handshakes may be reading the old
// ones). It returns how many were stapled.
func (fc *fileCerts) staple(ctx context.Context, client *http.Client) int {
	cur := fc.set.Load()
	now := time.Now()
	fresh := map[*tls.Certificate]*tls.Certificate{}
	for _, c := range cur.all() {
		if !stapleDue(c, now) {
			continue
		}
		raw, err := fetchStaple(ctx, client, c)
		if err != nil {
			fc.staples.WithLabelValues("error").Inc()
			fc.log.Warn("OCSP staple", "cert", c.Leaf.Subject.CommonName, "err", err)
			continue
		}
		cp := *c
		cp.OCSPStaple = raw
		fresh[c] = &cp
		fc.staples.WithLabelValues("ok").Inc()
	}
	if len(fresh) == 0 {
		return 0
	}
	next := cur.replace(fresh)
	if !fc.set.CompareAndSwap(cur, next) {
		return 0 // the files were reloaded meanwhile: the next pass staples the new set
	}
	return len(fresh)
}

// all returns each distinct certificate of the set once.
func (s *certSet) all() []*tls.Certificate {
	seen := map[*tls.Certificate]bool{}
	var out []*tls.Certificate
	add := func(c *tls.Certificate) {
		if c != nil && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	add(s.first)
	for _, c := range s.exact {
		add(c)
	}
	for _, c := range s.wild {
		add(c)
	}
	return out
}

// replace returns a copy of s with certificates swapped as in repl.
func (s *certSet) replace(repl map[*tls.Certificate]*tls.Certificate) *certSet {
	sw := func(c *tls.Certificate) *tls.Certificate {
		if r, ok := repl[c]; ok {
			return r
		}
		return c
	}
	out := &certSet{exact: map[string]*tls.Certificate{}, wild: map[string]*tls.Certificate{}, first: sw(s.first), stamps: s.stamps, infos: s.infos}
	for k, c := range s.exact {
		out.exact[k] = sw(c)
	}
	for k, c := range s.wild {
		out.wild[k] = sw(c)
	}
	return out
}
