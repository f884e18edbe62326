package acmeproxy

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"

	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Issued records the chain of an order a signer finished later
// (signer.Settler). Recording twice is harmless: the second finds the order
// no longer processing.
func (s *Server) Issued(ctx context.Context, orderID string, chain [][]byte) error {
	o, err := s.db.GetOrder(ctx, s.cfg.Profile, orderID)
	if err != nil {
		return err
	}
	if o.Status != acme.StatusProcessing {
		return nil
	}
	_, err = s.recordIssued(ctx, o, chain, s.pendingClient(ctx, orderID))
	if errors.Is(err, store.ErrWrongState) {
		return nil
	}
	return err
}

// Failed marks an order a signer gave up on invalid (signer.Settler). The
// client sees a generic problem; detail is kept for the operator.
func (s *Server) Failed(ctx context.Context, orderID, detail string) error {
	p := &problem.Problem{Type: acme.ErrorServerInternal, Status: http.StatusInternalServerError,
		Detail: "the certificate could not be issued; the operator can see why"}
	body, _ := json.Marshal(p)
	if err := s.db.FailOrder(ctx, orderID, body, detail, s.clock.Now()); err != nil {
		return err
	}
	s.metrics.IssueFailed(s.cfg.Profile, "abandoned")
	if o, err := s.db.GetOrder(ctx, s.cfg.Profile, orderID); err == nil {
		s.auditIssueFailed(ctx, o, s.pendingClient(ctx, orderID), detail)
	}
	s.log.Warn("certificate issuance failed", zap.String("event", "certificate_issue_failed"),
		zap.String("profile", s.cfg.Profile), zap.String("order", orderID), zap.String("detail", detail))
	return nil
}

// Refused marks an order invalid on a verdict its signer reached later
// (signer.Settler): the client sees the problem of kind with a generic
// detail; detail, the signer's reason, is kept for the operator.
func (s *Server) Refused(ctx context.Context, orderID string, kind signer.Kind, detail string) error {
	var p *problem.Problem
	switch kind {
	case signer.KindBadCSR:
		p = problem.BadCSRF("the signer refused the CSR; the operator can see why")
	case signer.KindRejectedIdentifier:
		p = problem.RejectedIdentifierF("the signer refused to issue for this order's identifiers; the operator can see why")
	default:
		return s.Failed(ctx, orderID, detail)
	}
	body, _ := json.Marshal(p)
	if err := s.db.FailOrder(ctx, orderID, body, detail, s.clock.Now()); err != nil {
		return err
	}
	s.metrics.IssueFailed(s.cfg.Profile, failureClass(&signer.Error{Kind: kind}))
	if o, err := s.db.GetOrder(ctx, s.cfg.Profile, orderID); err == nil {
		s.auditIssueFailed(ctx, o, s.pendingClient(ctx, orderID), detail)
	}
	s.log.Warn("certificate issuance refused by the signer", zap.String("event", "certificate_issue_failed"),
		zap.String("profile", s.cfg.Profile), zap.String("order", orderID), zap.String("detail", detail))
	return nil
}

// pendingClient is the client that finalized an order a signer finished
// later, as the relay's mapping recorded it; zero when unknown.
func (s *Server) pendingClient(ctx context.Context, orderID string) client {
	ro, err := s.db.GetRelayOrder(ctx, orderID)
	if err != nil {
		return client{}
	}
	return client{IP: ro.ClientAddr, UserAgent: ro.UserAgent}
}
