package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// issuanceFlow drives whole issuances through the authority, the local
// CA and a SQLite store whose writes are counted, as the benchmark's
// clients do through the HTTP front: one name, three challenges offered,
// the default limits (orders per account unbounded), and seven signed
// requests per certificate (each spending a nonce): new-order, the
// authorization, the http-01 answer (validated within the POST), the
// authorization and the order polled, finalize, the certificate's
// download.
type issuanceFlow struct {
	s   store.CountingStore
	au  *authority.Authority
	clk *clocktest.Fake
	// signing, when set, is called as the signer is asked to sign: after
	// the finalize's claim has committed, before the issuance's write.
	signing func()
	mu      sync.Mutex
	names   int
}

func newIssuanceFlow(tb testing.TB) *issuanceFlow {
	tb.Helper()
	f := &issuanceFlow{s: store.OpenSQLiteCounting(tb), clk: clocktest.New(time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC))}
	sgn, err := localca.New(steadyCA(tb, f.clk.Now()), localca.Options{Clock: f.clk, Lifetime: 7 * day})
	if err != nil {
		tb.Fatal(err)
	}
	// The default limits, but an account may order without end: a
	// sequential run is one account ordering a certificate every 7 ms of
	// the fake clock, past the default 1,000 an hour by its 1,001st. The
	// limit's row is written alike whatever its count.
	limits := authority.DefaultLimits()
	limits.OrdersPerAccount.Count = 1 << 30
	f.au, err = authority.New(authority.Config{Profile: "p", Limits: limits,
		Challenges: []string{acme.ChallengeHTTP01, acme.ChallengeDNS01, acme.ChallengeTLSALPN01}},
		authority.Options{DB: f.s.DB, Queue: jobs.NewQueue(f.s.DB, f.clk), Signer: markingSigner{sgn, f}, Validator: failNames{},
			Clock: f.clk, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// markingSigner tells its flow when a signature is asked for.
type markingSigner struct {
	signer.Signer
	f *issuanceFlow
}

func (m markingSigner) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	if m.f.signing != nil {
		m.f.signing()
	}
	return m.Signer.Issue(ctx, req)
}

func (f *issuanceFlow) account(tb testing.TB, i int) store.Account {
	tb.Helper()
	acct, _, err := f.au.CreateAccount(context.Background(), store.Account{Thumbprint: fmt.Sprintf("key-%d", i), KeyJWK: []byte(`{}`)},
		authority.Client{IP: fmt.Sprintf("192.0.2.%d", i%250+1)})
	if err != nil {
		tb.Fatal(err)
	}
	return acct
}

// issue runs one issuance for acct; step, when not nil, is told the name
// of each step as it ends.
func (f *issuanceFlow) issue(acct store.Account, step func(string)) error {
	ctx := context.Background()
	if step == nil {
		step = func(string) {}
	}
	spend := func() error {
		// A nonce as the front mints them: 32 bytes, expiring an hour
		// after now, in whole seconds (the clock moves on a millisecond
		// per request).
		f.clk.Advance(time.Millisecond)
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		expires := f.clk.Now().Add(time.Hour).Truncate(time.Second)
		if _, fresh, err := f.s.UseNonceAs(ctx, base64.RawURLEncoding.EncodeToString(b), expires, "p", acct.ID); err != nil || !fresh {
			return fmt.Errorf("nonce: %v, %w", fresh, err)
		}
		step("nonce")
		return nil
	}
	f.mu.Lock()
	f.names++
	name := fmt.Sprintf("host-%d.example.com", f.names)
	f.mu.Unlock()
	idents := []acme.Identifier{{Type: acme.IdentifierDNS, Value: name}}
	cl := authority.Client{IP: "192.0.2.1", UserAgent: "flow"}

	if err := spend(); err != nil {
		return err
	}
	lim, err := f.au.OrderLimits(ctx, acct, idents, []bool{false}, false, cl)
	if err != nil {
		return err
	}
	o, err := f.au.CreateOrder(ctx, acct.ID, idents, []bool{false}, time.Time{}, time.Time{}, "", nil, lim)
	if err != nil {
		return fmt.Errorf("new-order: %w", err)
	}
	step("new-order")
	if err := spend(); err != nil {
		return err
	}
	a, err := f.au.OwnAuthz(ctx, acct.ID, o.AuthzIDs[0])
	if err != nil {
		return err
	}
	if err := spend(); err != nil {
		return err
	}
	if _, err := f.au.AnswerChallenge(ctx, a.Challenges[0], a, acct.Thumbprint, authority.Client{}); err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	step("challenge")
	if err := spend(); err != nil {
		return err
	}
	if a, err = f.au.OwnAuthz(ctx, acct.ID, a.ID); err != nil || a.Status != acme.StatusValid {
		return fmt.Errorf("the authorization after its validation: %s, %v", a.Status, err)
	}
	if err := spend(); err != nil {
		return err
	}
	if o, err = f.au.OwnOrder(ctx, acct.ID, o.ID); err != nil || o.Status != acme.StatusReady {
		return fmt.Errorf("the order after its validation: %s, %v", o.Status, err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, key)
	if err != nil {
		return err
	}
	if err := spend(); err != nil {
		return err
	}
	if o, err = f.au.Finalize(ctx, acct, o.ID, func() ([]byte, error) { return csr, nil }, cl); err != nil || o.Status != acme.StatusValid {
		return fmt.Errorf("finalize: %s, %v", o.Status, err)
	}
	step("issue")
	if err := spend(); err != nil {
		return err
	}
	_, err = f.au.OwnCertificate(ctx, acct.ID, o.CertificateID)
	return err
}

// BenchmarkIssuanceWrites counts what the store's single SQLite writer
// does for each certificate of a whole issuance (see issuanceFlow): the
// statements it runs, its commits (lazy ones: no fsync), and the pages
// those commits append to the WAL (the checkpoint turned off so that the
// WAL keeps them) — figures the machine's load does not move. sequential
// issues one certificate at a time, so every write is a commit of its own
// (and the log shows the pages of each step and of each table and
// index); clients=8 runs eight flows at once, as the issuance
// benchmark's clients do, whose writes share commits.
//
//	go test -run '^$' -bench IssuanceWrites -benchtime 200x ./store/
func BenchmarkIssuanceWrites(b *testing.B) {
	for _, clients := range []int{1, 8} {
		name := "sequential"
		if clients > 1 {
			name = fmt.Sprintf("clients=%d", clients)
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			f := newIssuanceFlow(b)
			accts := make([]store.Account, clients)
			for i := range accts {
				accts[i] = f.account(b, i)
			}
			// A few certificates first, so that every table has its first
			// pages and every statement is prepared.
			for range 20 {
				if err := f.issue(accts[0], nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.s.KeepWAL(ctx); err != nil {
				b.Fatal(err)
			}
			f.s.Counter.Take()
			var (
				steps     = map[string]int64{}
				last      int64
				mark      = func(step string) {}
				stepCount = map[string]int{}
			)
			if clients == 1 {
				mark = func(step string) {
					n, err := f.s.WALFrames()
					if err != nil {
						b.Fatal(err)
					}
					steps[step] += n - last
					stepCount[step]++
					last = n
				}
				f.signing = func() { mark("claim") }
			}
			n := 0
			cpu0 := proccpu.Used()
			b.ResetTimer()
			if clients == 1 {
				for b.Loop() {
					if err := f.issue(accts[0], mark); err != nil {
						b.Fatal(err)
					}
					n++
				}
			} else {
				var (
					wg     sync.WaitGroup
					next   = make(chan struct{})
					failed = make(chan error, clients)
				)
				for _, acct := range accts {
					wg.Go(func() {
						for range next {
							if err := f.issue(acct, nil); err != nil {
								failed <- err
								for range next { // let the loop finish
								}
								return
							}
						}
					})
				}
				for b.Loop() {
					next <- struct{}{}
					n++
				}
				close(next)
				wg.Wait()
				close(failed)
				if err := <-failed; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu := proccpu.Used() - cpu0
			c := f.s.Counter.Take()
			frames, err := f.s.WALFrames()
			if err != nil {
				b.Fatal(err)
			}
			certs := float64(n)
			b.ReportMetric(float64(c.Statements)/certs, "stmts/cert")
			b.ReportMetric(float64(c.CommittedWrites)/certs, "writes/cert")
			b.ReportMetric(float64(c.Commits)/certs, "commits/cert")
			b.ReportMetric(float64(c.Commits-c.LazyCommits)/certs, "fsyncs/cert")
			b.ReportMetric(float64(frames)/certs, "WAL-pages/cert")
			b.ReportMetric(float64(cpu.Microseconds())/certs, "cpu-µs/cert")
			var lines []string
			for _, s := range slices.Sorted(maps.Keys(steps)) {
				lines = append(lines, fmt.Sprintf("  %-10s %5.1f pages per certificate, %4.1f per write", s,
					float64(steps[s])/certs, float64(steps[s])/float64(stepCount[s])))
			}
			byTree, err := f.s.WALFramesByTree(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			trees := slices.Collect(maps.Keys(byTree))
			sort.Slice(trees, func(i, j int) bool {
				return byTree[trees[i]] > byTree[trees[j]] || (byTree[trees[i]] == byTree[trees[j]] && trees[i] < trees[j])
			})
			for _, t := range trees {
				lines = append(lines, fmt.Sprintf("  %-34s %5.2f pages per certificate", t, float64(byTree[t])/certs))
			}
			stmts := slices.Collect(maps.Keys(c.ByStatement))
			sort.Slice(stmts, func(i, j int) bool {
				return c.ByStatement[stmts[i]] > c.ByStatement[stmts[j]] || (c.ByStatement[stmts[i]] == c.ByStatement[stmts[j]] && stmts[i] < stmts[j])
			})
			for _, s := range stmts {
				lines = append(lines, fmt.Sprintf("  %4.1f × %.110s", float64(c.ByStatement[s])/certs, oneLine(s)))
			}
			b.Logf("per step, table and statement (%d certificates):\n%s", n, strings.Join(lines, "\n"))
		})
	}
}
