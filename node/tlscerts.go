package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
)

// certFile is one configured certificate and key, with the config key that
// named it (for errors).
type certFile struct {
	key               string // tls.cert_file, or tls.certificates[i]
	certPath, keyPath string
}

// certSet is a loaded, immutable set of certificates chosen by SNI.
type certSet struct {
	exact  map[string]*tls.Certificate // lower-case DNS name → certificate
	wild   map[string]*tls.Certificate // "example.com" for *.example.com
	first  *tls.Certificate            // clients without SNI, or with an unknown name
	stamps []fileStamp                 // what was read, to notice changes
	infos  []CertInfo
}

// CertInfo describes a certificate for the status page.
type CertInfo struct {
	Source   string    `json:"source"` // the file, or "acme"
	Names    []string  `json:"names"`
	NotAfter time.Time `json:"not_after"`
}

type fileStamp struct {
	path  string
	mod   time.Time
	size  int64
	exist bool
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{path: path}
	}
	return fileStamp{path: path, mod: st.ModTime(), size: st.Size(), exist: true}
}

// loadCertSet reads and checks every file: a pair that does not parse, a
// key that does not match its certificate, or a certificate outside its
// validity period is an error naming the config key.
func loadCertSet(files []certFile, now time.Time) (*certSet, error) {
	s := &certSet{exact: map[string]*tls.Certificate{}, wild: map[string]*tls.Certificate{}}
	for _, f := range files {
		s.stamps = append(s.stamps, stampOf(f.certPath), stampOf(f.keyPath))
		pair, err := tls.LoadX509KeyPair(f.certPath, f.keyPath)
		if err != nil {
			return nil, &config.Error{Key: f.key, Value: f.certPath, Reason: "cannot be used with its key file " + f.keyPath + ": " + err.Error()}
		}
		leaf := pair.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, &config.Error{Key: f.key, Value: f.certPath, Reason: "does not parse: " + err.Error()}
			}
			pair.Leaf = leaf
		}
		switch {
		case now.After(leaf.NotAfter):
			return nil, &config.Error{Key: f.key, Value: f.certPath, Reason: "expired on " + leaf.NotAfter.UTC().Format(time.RFC3339)}
		case now.Before(leaf.NotBefore):
			return nil, &config.Error{Key: f.key, Value: f.certPath, Reason: "is not valid before " + leaf.NotBefore.UTC().Format(time.RFC3339)}
		}
		c := &pair
		if s.first == nil {
			s.first = c
		}
		names := leaf.DNSNames
		if len(names) == 0 && leaf.Subject.CommonName != "" {
			names = []string{leaf.Subject.CommonName}
		}
		for _, n := range names {
			n = strings.ToLower(n)
			if rest, ok := strings.CutPrefix(n, "*."); ok {
				if _, dup := s.wild[rest]; !dup {
					s.wild[rest] = c
				}
			} else if _, dup := s.exact[n]; !dup {
				s.exact[n] = c // the first file that names a host serves it
			}
		}
		s.infos = append(s.infos, CertInfo{Source: f.certPath, Names: names, NotAfter: leaf.NotAfter})
	}
	return s, nil
}

// match returns the certificate for an SNI name: exact, then a wildcard one
// label up; nil if none names it.
func (s *certSet) match(serverName string) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	if c := s.exact[name]; c != nil {
		return c
	}
	if _, parent, ok := strings.Cut(name, "."); ok {
		return s.wild[parent]
	}
	return nil
}

// fileCerts serves certificates from files and re-reads them when they
// change on disk. A change that does not load (a half-written file, a key
// that does not match yet) keeps the previous set and is retried.
type fileCerts struct {
	files   []certFile
	set     atomic.Pointer[certSet]
	log     *slog.Logger
	reloads *prometheus.CounterVec
	expiry  *prometheus.GaugeVec
	staples *prometheus.CounterVec
}

func newFileCerts(cfg *config.Config, log *slog.Logger, m func() *certMetrics) (*fileCerts, error) {
	return loadFileCerts(publicCertFiles(cfg), log, m)
}

// publicCertFiles are the public TLS listener's certificate files.
func publicCertFiles(cfg *config.Config) []certFile {
	var files []certFile
	if cfg.TLS.CertFile != "" {
		files = append(files, certFile{key: "tls.cert_file", certPath: cfg.TLS.CertFile, keyPath: cfg.TLS.KeyFile})
	}
	for i, p := range cfg.TLS.Certificates {
		files = append(files, certFile{key: fmt.Sprintf("tls.certificates[%d].cert_file", i), certPath: p.CertFile, keyPath: p.KeyFile})
	}
	return files
}

// CheckFiles reads the certificate files cfg names (the public listener's
// and admin.tls') as a start would, so that `edge config check` refuses
// what would stop `edge serve`: a key that does not match its
// certificate, a file that cannot be read, a certificate outside its
// validity period. Relative paths are read from the working directory,
// as serve reads them. The error names the config key.
func CheckFiles(cfg *config.Config) error {
	files := publicCertFiles(cfg)
	if cfg.Admin.TLS.CertFile != "" {
		files = append(files, certFile{key: "admin.tls.cert_file", certPath: cfg.Admin.TLS.CertFile, keyPath: cfg.Admin.TLS.KeyFile})
	}
	_, err := loadCertSet(files, time.Now())
	return err
}

// loadFileCerts loads files (nil: none) and serves them from then on,
// counted in the metrics metrics gives (registered on first use).
func loadFileCerts(files []certFile, log *slog.Logger, metrics func() *certMetrics) (*fileCerts, error) {
	if len(files) == 0 {
		return nil, nil
	}
	m := metrics()
	fc := &fileCerts{files: files, log: log, reloads: m.reloads, expiry: m.expiry, staples: m.staples}
	set, err := loadCertSet(files, time.Now())
	if err != nil {
		return nil, err
	}
	fc.store(set)
	return fc, nil
}

// certMetrics are the certificate files' metrics, shared by the public
// TLS listener's files and the admin listener's (admin.tls).
type certMetrics struct {
	reloads *prometheus.CounterVec
	expiry  *prometheus.GaugeVec
	staples *prometheus.CounterVec
}

func newCertMetrics(reg prometheus.Registerer) *certMetrics {
	m := &certMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_tls_certificate_reloads_total", Help: "Certificate files re-read after a change on disk, by result (ok, error: the previous certificates stay).",
		}, []string{"result"}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edge_tls_certificate_expiry_timestamp_seconds", Help: "When each configured certificate file expires (Unix time), the admin listener's (admin.tls) included.",
		}, []string{"file"}),
		staples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_tls_ocsp_staples_total", Help: "OCSP responses fetched for certificate files, by result (ok, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.reloads, m.expiry, m.staples)
	for _, r := range []string{"ok", "error"} {
		m.staples.WithLabelValues(r)
		m.reloads.WithLabelValues(r)
	}
	return m
}

func (fc *fileCerts) store(s *certSet) {
	fc.set.Store(s)
	for _, in := range s.infos {
		fc.expiry.WithLabelValues(in.Source).Set(float64(in.NotAfter.Unix()))
	}
}

// watch polls the files every interval until ctx ends, and keeps OCSP
// staples fresh (every stapleEvery). Polling, not inotify: it sees files
// replaced by rename (how certificate tools and Kubernetes secrets update
// them) and works on every filesystem.
func (fc *fileCerts) watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	client := &http.Client{Timeout: ocspTimeout}
	lastStaple := time.Time{}
	var failedAt []fileStamp // the files as they were when they last failed to load
	for {
		if time.Since(lastStaple) >= stapleEvery {
			fc.staple(ctx, client)
			lastStaple = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := fc.set.Load()
		if !stampsChanged(cur.stamps) {
			continue
		}
		set, err := loadCertSet(fc.files, time.Now())
		if err != nil {
			// Tried again at every poll (a pair not valid yet becomes
			// valid with no change on disk: a review's
			// TestACertificateNotValidYetIsLoadedWhenItIs), reported once
			// per change of the files.
			if stampsChanged(failedAt) {
				fc.reloads.WithLabelValues("error").Inc()
				fc.log.Error("certificate files changed but do not load; keeping the previous ones, trying again", "err", err)
				failedAt = failedAt[:0]
				for _, f := range fc.files {
					failedAt = append(failedAt, stampOf(f.certPath), stampOf(f.keyPath))
				}
			}
			continue
		}
		failedAt = nil
		fc.store(set)
		lastStaple = time.Time{} // staple the new certificates now
		fc.reloads.WithLabelValues("ok").Inc()
		fc.log.Info("certificates reloaded", "files", len(fc.files))
	}
}

// stampsChanged reports whether any file differs from its stamp (no
// stamps: changed).
func stampsChanged(stamps []fileStamp) bool {
	if len(stamps) == 0 {
		return true
	}
	for _, st := range stamps {
		if stampOf(st.path) != st {
			return true
		}
	}
	return false
}

var errNoCertificate = errors.New("tls: no certificate for this server name")

// stapleEvery is how often staples are checked; each is refreshed half way
// to its NextUpdate (responders publish for days, so a minute is plenty).
const stapleEvery = time.Minute
