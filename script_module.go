package caddyacmeproxy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	apcaddyfile "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/script"
)

// Script is acme_proxy.signers.script: an operator's program signs each
// certificate, and revokes it. Finalize answers processing; a
// script_issue job runs the program (see the README, "Script signer",
// for what it reads and must print).
type Script struct {
	// Command is the program, an absolute path, and its arguments. It is
	// run directly, never through a shell. Placeholders in it are
	// replaced when the config loads (one that is empty fails the load);
	// an argument a placeholder filled (of 6 bytes or more) is redacted
	// from the program's stderr, as the env values are. Required.
	Command []string `json:"command"`
	// Timeout bounds one run; the program's process group is killed when
	// it passes. Default 1m.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// Env are variables added to the program's environment, which
	// otherwise holds only PATH and the ACME_PROXY_ variables. Values may
	// hold Caddy placeholders ({env.NAME}, {file.path}), replaced when
	// the config loads (one that is empty fails the load); the values (of 6 bytes or more) are redacted from
	// the program's stderr before it is stored or logged.
	Env map[string]string `json:"env,omitempty"`
	// RevokeOn runs the program to revoke; when false, revocation is
	// recorded by the proxy alone. Default true.
	RevokeOn *bool `json:"revoke,omitempty"`

	*script.Signer `json:"-"`
}

// CaddyModule returns the Caddy module information.
func (*Script) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "acme_proxy.signers.script", New: func() caddy.Module { return new(Script) }}
}

// UnmarshalCaddyfile reads the block of `signer script`:
//
//	signer script {
//		command <absolute path> [<args...>]
//		timeout <duration>
//		env     <name> <value>
//		revoke  on|off
//	}
//
// env may be given once per variable.
func (s *Script) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := apcaddyfile.StartSigner(d); err != nil {
		return err
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		// env is given once per variable (checked below); every other
		// key takes one value, or one command line.
		if d.Val() != "env" {
			if err := apcaddyfile.Once(d, seen, "signer."+d.Val()); err != nil {
				return err
			}
		}
		var err error
		switch key := d.Val(); key {
		case "command":
			err = apcaddyfile.AppendArgs(d, "signer.command", &s.Command)
		case "timeout":
			s.Timeout, err = apcaddyfile.DurationArg(d, "signer.timeout")
		case "env":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("acme_proxy: signer.env: want a name and a value, got %d values", len(args))
			}
			if _, dup := s.Env[args[0]]; dup {
				return d.Errf("acme_proxy: signer.env: %s is set twice", args[0])
			}
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[args[0]] = args[1]
		case "revoke":
			var v string
			if v, err = apcaddyfile.OneArg(d, "signer.revoke"); err == nil {
				switch v {
				case "on", "off":
					on := v == "on"
					s.RevokeOn = &on
				default:
					err = d.Errf("acme_proxy: signer.revoke: %q must be on or off", v)
				}
			}
		default:
			err = d.Errf("acme_proxy: signer script: unknown setting %q", key)
		}
		if err != nil {
			return err
		}
	}
	if len(s.Command) == 0 {
		return d.Err("acme_proxy: signer.command: required by signer script")
	}
	return nil
}

// Provision replaces the placeholders of the env values and of the
// command — one that is empty fails, naming the variable or the
// argument: the value is most likely a secret (a PIN, a token) the
// program cannot do without — and builds the signer, which checks that
// the command is an absolute path to an executable file.
func (s *Script) Provision(caddy.Context) error {
	if s.Timeout < 0 {
		return fmt.Errorf("signer.timeout: must be positive, not %s", time.Duration(s.Timeout))
	}
	repl := caddy.NewReplacer()
	env := make(map[string]string, len(s.Env))
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		v, err := expandRequired(repl, "signer.env "+k, s.Env[k])
		if err != nil {
			return err
		}
		env[k] = v
	}
	// The command's placeholders are replaced as the env values' are; an
	// argument a placeholder filled may be a token, so it is redacted
	// from the program's stderr as they are.
	command := make([]string, len(s.Command))
	redact := map[string]string{}
	for i, a := range s.Command {
		key := "signer.command"
		if i > 0 {
			key += " arg " + strconv.Itoa(i)
		}
		v, err := expandRequired(repl, key, a)
		if err != nil {
			return err
		}
		if i > 0 && v != a {
			redact["arg "+strconv.Itoa(i)] = v
		}
		command[i] = v
	}
	revoke := s.RevokeOn == nil || *s.RevokeOn
	var err error
	s.Signer, err = script.New(script.Options{Command: command, Timeout: time.Duration(s.Timeout), Env: env, Redact: redact, Revoke: revoke})
	if err != nil {
		return fmt.Errorf("signer: %w", err)
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Script)(nil)
	_ caddyfile.Unmarshaler = (*Script)(nil)
	_ signer.Signer         = (*Script)(nil)
	_ signer.JobWorker      = (*Script)(nil)
)
