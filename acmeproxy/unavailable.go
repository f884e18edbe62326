package acmeproxy

import (
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

const (
	// storeRetryAfter is how long a client is asked to wait while the
	// store cannot take writes (a full disk, a read-only file) or does not
	// answer within a request's deadline.
	storeRetryAfter = 30 * time.Second
	// storeLogEvery spaces the log lines about such a condition: under
	// load every request meets it, and one line per request buries the
	// log (and, on a full disk, the disk the log lives on).
	storeLogEvery = time.Minute
)

// answerStoreUnavailable answers a request the store could not take:
// 503 with Retry-After, as RFC 9110 §15.6.4 has it for a temporary
// condition, and a log line only now and then.
func (s *Server) answerStoreUnavailable(w http.ResponseWriter, r *http.Request, err error) *problem.Problem {
	if log, n := s.storeDown.Note(s.clock.Now()); log {
		s.log.Error("the database cannot take writes or does not answer; requests are answered 503 until it does",
			zap.String("event", "store_unavailable"), zap.String("profile", s.cfg.Profile),
			zap.Int("requests", n), zap.Duration("interval", storeLogEvery),
			zap.String("path", r.URL.Path), zap.Error(err))
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(storeRetryAfter/time.Second)))
	return problem.Unavailable("the server cannot store anything now; retry later")
}

// noteStoreBack logs, once, that requests are stored again after the
// database was away, with the 503s answered since the last line.
func (s *Server) noteStoreBack() {
	if log, n := s.storeDown.Recovered(); log {
		s.log.Info("the database takes writes again", zap.String("event", "store_available"),
			zap.String("profile", s.cfg.Profile), zap.Int("requests", n))
	}
}
