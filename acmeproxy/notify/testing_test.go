package notify_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"math/big"
	"net"
	"net/textproto"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// rig is a store, a queue, a Deliverer knowing dests and a runner with
// millisecond backoffs, logging to an observer.
type rig struct {
	db    *store.DB
	queue *jobs.Queue
	d     *notify.Deliverer
	logs  *observer.ObservedLogs
}

func newRig(t *testing.T, opts notify.Options, dests ...notify.Destination) *rig {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "n.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	core, logs := observer.New(zap.DebugLevel)
	opts.Logger = zap.New(core)
	d := notify.NewDeliverer(opts)
	if err := d.Register(dests...); err != nil {
		t.Fatal(err)
	}
	q := jobs.NewQueue(db, nil)
	r, err := jobs.NewRunner(q, []jobs.Handler{d}, jobs.RunnerOptions{
		BackoffBase: time.Millisecond, BackoffCap: 5 * time.Millisecond, Jitter: -1, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	return &rig{db: db, queue: q, d: d, logs: logs}
}

// event stores ev's audit row with its deliveries to dests, as the ACME
// server does, and returns the delivery jobs' ids.
func (r *rig) event(t *testing.T, ev notify.Event, dests ...notify.Destination) []int64 {
	t.Helper()
	ctx := context.Background()
	if err := r.db.InsertAudit(ctx, store.AuditEvent{At: ev.Time, Event: ev.Event, Outcome: "success", Profile: ev.Profile,
		Jobs: notify.Jobs(dests, ev)}); err != nil {
		t.Fatal(err)
	}
	r.queue.Wake(notify.Kind)
	js, err := r.queue.List(ctx, store.JobFilter{Kind: notify.Kind, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range js {
		ids = append(ids, j.ID)
	}
	return ids
}

// wait polls a job until it is settled.
func (r *rig) wait(t *testing.T, id int64) store.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := r.queue.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != store.JobReady && j.Status != store.JobRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s after 10s (attempts %d, last error %q)", id, j.Status, j.Attempts, j.LastError)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func sampleEvent(name string) notify.Event {
	return notify.Event{Event: name, Profile: "internal", Order: "ord1", Account: "acct1",
		Identifiers: []acme.Identifier{{Type: "dns", Value: "a.example.com"}, {Type: "dns", Value: "b.example.com"}},
		Serial:      "0a1b", ClientAddress: "192.0.2.7", Time: time.Now().UTC().Truncate(time.Millisecond)}
}

// ---- an SMTP server that speaks just enough ----

type mail struct {
	from  string
	to    []string
	data  string
	tls   bool
	auth  string
	hello string
}

type smtpServer struct {
	addr     string
	implicit bool
	// rcptReply answers RCPT TO an address, by address, with a refusal
	// ("550 5.1.1 no such user") instead of 250.
	rcptReply map[string]string
	// noStartTLS: EHLO does not offer STARTTLS (a server without it,
	// or someone between that strips it).
	noStartTLS bool
	// fqdnHELO: an EHLO name neither fully qualified nor an address
	// literal is refused, as Postfix's reject_non_fqdn_helo_hostname
	// does.
	fqdnHELO bool
	// authMechs is what EHLO offers as AUTH mechanisms: "" is "PLAIN",
	// "-" offers no AUTH at all (a server without authentication).
	authMechs string
	// authReply, when set, answers AUTH instead of 235, given the
	// command's argument (a server quoting what it was sent); for LOGIN
	// the argument is "LOGIN <username> <password>" as the client sent
	// them, base64-encoded, after the prompts.
	authReply func(arg string) string
	certs     *x509.CertPool
	cfg       *tls.Config

	mu     sync.Mutex
	mails  []mail
	auths  int      // AUTH commands received, over TLS or not
	logins []string // "username:password" each AUTH LOGIN was sent
	hellos []string // EHLO (or HELO) names, in order
	got    chan struct{}
}

// startSMTP serves SMTP on loopback, with STARTTLS (or TLS from the first
// byte when implicit), until the test ends.
func startSMTP(t *testing.T, implicit bool) *smtpServer {
	t.Helper()
	cert, pool := selfSigned(t)
	s := &smtpServer{implicit: implicit, certs: pool, got: make(chan struct{}, 10),
		cfg: &tls.Config{Certificates: []tls.Certificate{cert}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if implicit {
		ln = tls.NewListener(ln, s.cfg)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return s
}

func (s *smtpServer) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tp := textproto.NewConn(c)
	var m mail
	m.tls = s.implicit
	reply := func(lines ...string) { _ = tp.PrintfLine("%s", strings.Join(lines, "\r\n")) }
	reply("220 test ESMTP")
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			m.hello = arg
			s.mu.Lock()
			s.hellos = append(s.hellos, arg)
			s.mu.Unlock()
			if s.fqdnHELO && !strings.Contains(arg, ".") && !strings.HasPrefix(arg, "[") {
				reply("504 5.5.2 <" + arg + ">: Helo command rejected: need fully-qualified hostname")
				continue
			}
			lines := []string{"250-test"}
			if !m.tls && !s.noStartTLS {
				lines = append(lines, "250-STARTTLS")
			}
			switch s.authMechs {
			case "":
				lines = append(lines, "250-AUTH PLAIN")
			case "-":
			default:
				lines = append(lines, "250-AUTH "+s.authMechs)
			}
			last := len(lines) - 1
			lines[last] = "250 " + lines[last][len("250-"):]
			reply(lines...)
		case "STARTTLS":
			reply("220 go ahead")
			tc := tls.Server(c, s.cfg)
			if tc.Handshake() != nil {
				return
			}
			c, m.tls = tc, true
			tp = textproto.NewConn(tc)
		case "AUTH":
			m.auth = arg
			s.mu.Lock()
			s.auths++
			s.mu.Unlock()
			mech, _, _ := strings.Cut(arg, " ")
			offered := s.authMechs
			if offered == "" {
				offered = "PLAIN"
			}
			if !slices.Contains(strings.Fields(strings.ToUpper(offered)), strings.ToUpper(mech)) {
				reply("504 5.5.4 Unrecognized authentication type")
				continue
			}
			if strings.EqualFold(mech, "LOGIN") && !strings.Contains(arg, " ") {
				// draft-murchison-sasl-login: prompts, base64-encoded.
				var answers []string
				for _, prompt := range []string{"Username:", "Password:"} {
					reply("334 " + base64.StdEncoding.EncodeToString([]byte(prompt)))
					a, err := tp.ReadLine()
					if err != nil {
						return
					}
					answers = append(answers, a)
				}
				arg = "LOGIN " + strings.Join(answers, " ")
				user, _ := base64.StdEncoding.DecodeString(answers[0])
				pass, _ := base64.StdEncoding.DecodeString(answers[1])
				s.mu.Lock()
				s.logins = append(s.logins, string(user)+":"+string(pass))
				s.mu.Unlock()
			}
			if s.authReply != nil {
				reply(s.authReply(arg))
				continue
			}
			reply("235 ok")
		case "MAIL":
			m.from = strings.TrimSuffix(strings.TrimPrefix(arg, "FROM:<"), ">")
			reply("250 ok")
		case "RCPT":
			to := strings.TrimSuffix(strings.TrimPrefix(arg, "TO:<"), ">")
			if r, ok := s.rcptReply[to]; ok {
				reply(r)
				continue
			}
			m.to = append(m.to, to)
			reply("250 ok")
		case "DATA":
			reply("354 go on")
			data, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			m.data = string(data)
			s.mu.Lock()
			s.mails = append(s.mails, m)
			s.mu.Unlock()
			s.got <- struct{}{}
			reply("250 queued")
		case "QUIT":
			reply("221 bye")
			return
		default:
			reply("502 what")
		}
	}
}

func (s *smtpServer) authCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.auths
}

func (s *smtpServer) loginsSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.logins...)
}

func (s *smtpServer) helloNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.hellos...)
}

func (s *smtpServer) received() []mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mail(nil), s.mails...)
}

// selfSigned is a certificate for 127.0.0.1 and the pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smtp test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func zapString(k, v string) zap.Field { return zap.String(k, v) }
