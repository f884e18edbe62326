// Package script is the script signer: an operator's program signs each
// certificate. Finalize answers processing; a durable script_issue job,
// keyed by the order and ending at the order's expiry, runs the program
// with the request as one JSON object on stdin and reads the PEM chain
// from its stdout. Revocation runs the same program (operation "revoke")
// from the ACME core's signer_revoke job. The contract the program sees is
// documented in the README ("Script signer") and in request.go.
//
// The program runs without a shell, in a clean environment (PATH and the
// configured variables only), in a process group of its own that is
// killed at the timeout and once the program exits; its output is capped,
// and the configured variables' values are taken out of its stderr before
// anything of it is stored or logged.
package script

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/internal/execpath"
	"github.com/acmeproxy/caddy-acme-proxy/internal/scriptout"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// IssueKind is the kind of the job that runs the program for one order.
const IssueKind = "script_issue"

// Exit codes of the contract.
const (
	ExitOK       = 0
	ExitRefused  = 2  // the CSR or request is refused: the order fails
	ExitTempFail = 75 // EX_TEMPFAIL: try again later
)

// Defaults of Options.
const (
	DefaultTimeout     = time.Minute
	DefaultMaxAttempts = 5
	// DefaultPath is the PATH the program gets when Caddy has none.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// Temporary failures (exit 75) wait tempFailBase·2^(n−1), capped, without
// spending an attempt: the order's expiry bounds them.
const (
	tempFailBase = 15 * time.Second
	tempFailCap  = 10 * time.Minute
)

// Options configure a Signer.
type Options struct {
	// Command is the program and its arguments; Command[0] must be an
	// absolute path. Required.
	Command []string
	// Timeout bounds one run of the program (DefaultTimeout).
	Timeout time.Duration
	// Env is added to the program's environment; a PATH here replaces
	// Caddy's. Its values of scriptout.MinRedacted bytes or more are
	// taken out of the program's stderr, as "[redacted env NAME]".
	Env map[string]string
	// Redact are more values, by name, taken out of the program's stderr
	// as Env's are, as "[redacted NAME]": the configuration's glue names
	// here the arguments of Command that its placeholders filled ("arg
	// 2"), which may be tokens.
	Redact map[string]string
	// Revoke, when set, runs the program to revoke; when not, revocation
	// is recorded by the proxy alone.
	Revoke bool
	// MaxAttempts is a script_issue job's attempt budget
	// (DefaultMaxAttempts).
	MaxAttempts int
	// Clock tells the time; default the wall clock.
	Clock clock.Clock
}

// Signer is the script signer of one profile.
type Signer struct {
	opts   Options
	env    []string           // PATH and Env, sorted by name
	redact scriptout.Redactor // Env's values, out of the program's stderr

	mu        sync.Mutex
	bound     signer.Bound   // its profile, once bound
	tempFails map[string]int // order → consecutive exit 75s, for the backoff
	// signed holds a checked chain the Settler failed to record, so the
	// next attempt records it instead of signing the order again.
	signed map[string][][]byte
}

// New checks opts and returns a Signer. Errors name the configuration key.
func New(opts Options) (*Signer, error) {
	if len(opts.Command) == 0 || opts.Command[0] == "" {
		return nil, errors.New("signer.command: required")
	}
	if err := execpath.Check(opts.Command[0]); err != nil {
		return nil, fmt.Errorf("signer.command: %w", err)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("signer.timeout: must be positive, not %s", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	vars := map[string]string{"PATH": os.Getenv("PATH")}
	if vars["PATH"] == "" {
		vars["PATH"] = DefaultPath
	}
	for k, v := range opts.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("signer.env: %q is not a valid environment variable", k)
		}
		if strings.HasPrefix(k, "ACME_PROXY_") {
			return nil, fmt.Errorf("signer.env: %s: the ACME_PROXY_ variables are the proxy's", k)
		}
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return &Signer{opts: opts, env: env, redact: envRedactor(opts.Env, opts.Redact), tempFails: map[string]int{}, signed: map[string][][]byte{}}, nil
}

// envRedactor takes the values of env out of the program's stderr, each
// as "[redacted env NAME]", and those of more, each as "[redacted
// NAME]". The values PATH and the ACME_PROXY_ variables get from
// elsewhere are not redacted.
func envRedactor(env, more map[string]string) scriptout.Redactor {
	named := make(map[string]string, len(env)+len(more))
	for k, v := range more {
		named[k] = v
	}
	for k, v := range env {
		named["env "+k] = v
	}
	return scriptout.NewRedactor(named)
}

// Bind gives the signer its profile's Settler, queue and store.
func (s *Signer) Bind(b signer.Binding) error { return s.bound.Bind("script", b) }

func (s *Signer) binding() (*signer.Binding, *zap.Logger, error) { return s.bound.Get("script") }

// issuePayload is a script_issue job's payload: the request as the
// program will see it, so the job needs nothing else to run.
type issuePayload struct {
	Profile     string            `json:"profile"`
	Order       string            `json:"order"`
	AccountID   string            `json:"account_id"`
	Identifiers []acme.Identifier `json:"identifiers"`
	CSR         []byte            `json:"csr"`
	NotBefore   time.Time         `json:"not_before,omitzero"`
	NotAfter    time.Time         `json:"not_after,omitzero"`
	ClientAddr  string            `json:"client_addr,omitempty"`
	// CertificateProfile is the name of the order's certificate profile;
	// "" for none.
	CertificateProfile string `json:"certificate_profile,omitempty"`
}

// certificateProfileName is p's name, "" for none.
func certificateProfileName(p *signer.CertificateProfile) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// Issue queues the order's script_issue job; the order stays processing
// until the job reports. A repeat for the same order (a finalize resumed
// after a crash) finds the live job and changes nothing.
func (s *Signer) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	b, log, err := s.binding()
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	if len(req.CSRDER) == 0 {
		return signer.IssueOutcome{}, errors.New("script: issue request without a CSR")
	}
	o, err := b.DB.GetOrder(ctx, b.Profile, req.OrderID)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	job, created, err := b.Queue.Enqueue(ctx, jobs.Spec{
		Kind: IssueKind, Key: req.OrderID, Lane: signer.SigningLane(b.Profile),
		Payload: issuePayload{Profile: b.Profile, Order: req.OrderID, AccountID: o.AccountID,
			Identifiers: req.Identifiers, CSR: req.CSRDER, NotBefore: req.NotBefore, NotAfter: req.NotAfter,
			ClientAddr: req.ClientAddr, CertificateProfile: certificateProfileName(req.CertificateProfile)},
		Deadline: o.Expires, MaxAttempts: s.opts.MaxAttempts,
	})
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	if created {
		log.Info("script issuance queued", zap.String("event", "script_queued"), zap.String("profile", b.Profile),
			zap.String("order", req.OrderID), zap.Int64("job", job.ID))
	}
	return signer.IssueOutcome{Pending: true}, nil
}

// JobKinds implements signer.JobWorker.
func (s *Signer) JobKinds() []string { return []string{IssueKind} }

// RecoverJobs implements signer.JobWorker. A script_issue job is queued in
// the transaction-free step after the order was claimed; an order a crash
// left processing without its job is handed back to Issue by the ACME
// core's resume sweep, which queues it again. Nothing to do here.
func (s *Signer) RecoverJobs(context.Context, *jobs.Queue) error { return nil }

// RunJob does one run of the program for an order.
func (s *Signer) RunJob(ctx context.Context, job *jobs.Job) jobs.Outcome {
	if job.Kind != IssueKind {
		return jobs.Failed("script: unknown job kind " + job.Kind)
	}
	var p issuePayload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	b, log, err := s.binding()
	if err != nil {
		return jobs.RetryAfter(err.Error(), 30*time.Second)
	}
	o, err := b.DB.GetOrder(ctx, b.Profile, p.Order)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Failed("no order " + p.Order + " in profile " + b.Profile)
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	if o.Status != acme.StatusProcessing {
		s.forgetTempFails(p.Order)
		if o.Status == acme.StatusInvalid {
			// An operator's retry of a job whose order failed: say so
			// rather than report done.
			return jobs.Failed("order " + p.Order + " is invalid; there is nothing to issue")
		}
		return jobs.Done() // settled already, by an earlier attempt
	}
	if chain := s.signedChain(p.Order); chain != nil {
		return s.record(ctx, b, p.Order, chain)
	}
	if p.CertificateProfile != "" && b.CertificateProfile != nil {
		// A reload may have withdrawn it while the job waited (an exit
		// 75's backoff, a worker down): the program is not asked to
		// apply it, as the relay does not apply one and a finalize would
		// refuse it (invalidProfile).
		if _, ok := b.CertificateProfile(p.CertificateProfile); !ok {
			return jobs.Failed(fmt.Sprintf("the order's certificate profile %q is no longer offered", p.CertificateProfile))
		}
	}
	csr, err := x509.ParseCertificateRequest(p.CSR)
	if err != nil {
		return jobs.Failed("the order's CSR does not parse: " + err.Error())
	}
	in, err := json.Marshal(issueRequestOf(p))
	if err != nil {
		return jobs.Failed(err.Error())
	}
	res, err := execute(ctx, run{Argv: s.opts.Command, Env: s.environ("issue", p.Order, p.Profile, p.Identifiers),
		Stdin: in, Timeout: s.opts.Timeout, Redact: s.redact})
	if err != nil {
		return jobs.Retry(err.Error())
	}
	out := s.issueOutcome(ctx, b, p, csr, res)
	log.Info("script run", zap.String("event", "script_run"), zap.String("profile", b.Profile),
		zap.String("order", p.Order), zap.Int("attempt", job.Attempts), zap.String("result", res.describe()),
		zap.String("outcome", out.String()))
	return out
}

// issueOutcome turns one run into the job's outcome, reporting to the
// Settler what ends the order.
func (s *Signer) issueOutcome(ctx context.Context, b *signer.Binding, p issuePayload, csr *x509.CertificateRequest, res result) jobs.Outcome {
	prog := s.opts.Command[0]
	switch {
	case res.Interrupted:
		// The runner is stopping; this run was nobody's fault.
		return jobs.RetryAfter("interrupted", 0)
	case res.TimedOut:
		return jobs.Retry(fmt.Sprintf("%s timed out after %s and was killed", prog, s.opts.Timeout))
	case res.Signal != 0 || res.Exit != ExitOK && res.Exit != ExitRefused && res.Exit != ExitTempFail:
		return jobs.Retry(prog + " " + res.describe())
	case res.Exit == ExitTempFail:
		return jobs.RetryAfter(prog+" failed temporarily: "+res.describe(), s.tempFailDelay(p.Order))
	case res.Exit == ExitRefused:
		kind, why := refusal(res.firstStderrLine())
		if kind == signer.KindBadValidity && p.NotBefore.IsZero() && p.NotAfter.IsZero() {
			// The client asked for no dates: the ones refused are the
			// signer's own choice, not the client's request to fix.
			return jobs.Failed(prog + " refused validity dates the order did not ask for: " + why)
		}
		if err := b.Settler.Refused(ctx, p.Order, &signer.Error{Kind: kind}, prog+" refused the request: "+why); err != nil {
			return jobs.Retry("recording the refusal: " + err.Error())
		}
		s.forgetTempFails(p.Order)
		return jobs.Done()
	}
	if res.StdoutCapped {
		return jobs.Retry(fmt.Sprintf("%s wrote more than %d bytes on stdout", prog, MaxStdout))
	}
	chain, err := parseChain(res.Stdout, csr.PublicKey, p.Identifiers)
	if err == nil {
		err = checkDatesAsked(chain[0], p.NotBefore, p.NotAfter)
	}
	if mis := (*notTheOrders)(nil); errors.As(err, &mis) {
		// A mis-issuance, not a temporary fault: another run would have
		// the backend issue yet another certificate. The order fails now.
		return jobs.Failed(prog + " exited 0 with a certificate that is not the order's: " + mis.Error())
	}
	if err != nil {
		return jobs.Retry(prog + " exited 0 but its output is not the order's certificate: " + err.Error())
	}
	return s.record(ctx, b, p.Order, chain)
}

// record hands a checked chain to the Settler; when that fails, the chain
// is kept for the next attempt.
func (s *Signer) record(ctx context.Context, b *signer.Binding, order string, chain [][]byte) jobs.Outcome {
	s.mu.Lock()
	s.signed[order] = chain
	s.mu.Unlock()
	if err := b.Settler.Issued(ctx, order, chain); err != nil {
		return jobs.Retry("recording the certificate: " + err.Error())
	}
	s.forgetTempFails(order)
	return jobs.Done()
}

func (s *Signer) signedChain(order string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signed[order]
}

// refusal reads the kind of an exit-2 refusal from the program's first
// stderr line: "rejectedIdentifier: <why>" refuses a name,
// "badValidity: <why>" the notBefore/notAfter asked for (RFC 8555 §7.4:
// refused rather than signed with other dates), anything else the CSR.
func refusal(line string) (signer.Kind, string) {
	if why, ok := strings.CutPrefix(line, "rejectedIdentifier:"); ok {
		return signer.KindRejectedIdentifier, strings.TrimSpace(why)
	}
	if why, ok := strings.CutPrefix(line, "badValidity:"); ok {
		return signer.KindBadValidity, strings.TrimSpace(why)
	}
	if why, ok := strings.CutPrefix(line, "badCSR:"); ok {
		return signer.KindBadCSR, strings.TrimSpace(why)
	}
	if line == "" {
		line = "(nothing on stderr)"
	}
	return signer.KindBadCSR, line
}

func (s *Signer) tempFailDelay(order string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tempFails[order]++
	d := tempFailBase
	for i := 1; i < s.tempFails[order] && d < tempFailCap; i++ {
		d *= 2
	}
	return min(d, tempFailCap)
}

// forgetTempFails drops what the signer keeps in memory for an order
// that is settled.
func (s *Signer) forgetTempFails(order string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tempFails, order)
	delete(s.signed, order)
}

// AbandonJob fails the order through the Settler, with the real reason
// for the operator: why the job was retired and what the program last
// did.
func (s *Signer) AbandonJob(ctx context.Context, job *jobs.Job, reason string) error {
	var p issuePayload
	if jobs.Decode(job, &p) != nil {
		return nil
	}
	b, _, err := s.binding()
	if err != nil {
		return nil
	}
	s.forgetTempFails(p.Order)
	if job.LastError != "" && !strings.Contains(reason, job.LastError) {
		// Cancelled by an operator, say: what the program did is still
		// the reason the order failed.
		reason += "; last error: " + job.LastError
	}
	// Failing the order is guarded on it still processing: a second run
	// changes nothing, and one that could not write is called again.
	if err := b.Settler.Failed(ctx, p.Order, "script signer "+s.opts.Command[0]+" failed: "+reason); err != nil {
		return fmt.Errorf("script: recording the failure of order %s: %w", p.Order, err)
	}
	return nil
}

// Revoke runs the program to revoke cert (when revoke is on). Exit 2 is
// the program's refusal (signer.ErrRevocationRefused); any other exit but
// 0 is an error, which the signer_revoke job retries.
func (s *Signer) Revoke(ctx context.Context, cert *x509.Certificate, reason *int) error {
	if !s.opts.Revoke {
		return nil
	}
	b, _, err := s.binding()
	if err != nil {
		return err
	}
	orderID, err := orderOf(ctx, b, cert)
	if err != nil {
		return err
	}
	code := 0
	if reason != nil {
		code = *reason
	}
	in, err := json.Marshal(revokeRequest{Version: 1, Operation: "revoke", Profile: b.Profile, OrderID: orderID,
		Certificate: base64.RawURLEncoding.EncodeToString(cert.Raw), Reason: code})
	if err != nil {
		return err
	}
	res, err := execute(ctx, run{Argv: s.opts.Command, Env: s.environ("revoke", orderID, b.Profile, certIdentifiers(cert)),
		Stdin: in, Timeout: s.opts.Timeout, Redact: s.redact})
	if err != nil {
		return err
	}
	if res.Exit == ExitRefused && !res.TimedOut && !res.Interrupted && res.Signal == 0 {
		return fmt.Errorf("script: revoking serial %x: %w: %s %s", cert.SerialNumber, signer.ErrRevocationRefused, s.opts.Command[0], res.describe())
	}
	if res.TimedOut || res.Interrupted || res.Signal != 0 || res.Exit != ExitOK {
		return fmt.Errorf("script: revoking serial %x: %s %s", cert.SerialNumber, s.opts.Command[0], res.describe())
	}
	return nil
}

// orderOf is the order of the profile's certificate cert, "" when the
// store has none. A serial is unique per issuing CA only (two `openssl
// ca` CAs both count from 01): the order is the one whose stored leaf is
// cert, byte for byte.
func orderOf(ctx context.Context, b *signer.Binding, cert *x509.Certificate) (string, error) {
	cs, err := b.DB.CertificatesBySerial(ctx, b.Profile, hex.EncodeToString(cert.SerialNumber.Bytes()))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	c, _ := store.CertificateWithLeaf(cs, cert.Raw)
	return c.OrderID, nil
}

// RevocationRoute is signer.RevokeByJob: the program must be told.
func (s *Signer) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

// environ is the program's whole environment for one run.
func (s *Signer) environ(op, order, profile string, ids []acme.Identifier) []string {
	vals := make([]string, len(ids))
	for i, id := range ids {
		vals[i] = id.Value
	}
	return append(append([]string(nil), s.env...),
		"ACME_PROXY_OPERATION="+op,
		"ACME_PROXY_ORDER_ID="+order,
		"ACME_PROXY_PROFILE="+profile,
		"ACME_PROXY_IDENTIFIERS="+strings.Join(vals, ","),
	)
}

func certIdentifiers(c *x509.Certificate) []acme.Identifier {
	var out []acme.Identifier
	for _, n := range c.DNSNames {
		out = append(out, acme.Identifier{Type: acme.IdentifierDNS, Value: n})
	}
	for _, ip := range c.IPAddresses {
		out = append(out, acme.Identifier{Type: acme.IdentifierIP, Value: ip.String()})
	}
	return out
}

var (
	_ signer.Signer    = (*Signer)(nil)
	_ signer.Binder    = (*Signer)(nil)
	_ signer.JobWorker = (*Signer)(nil)
)
