#!/usr/bin/env bash
# openssl-ca.sh — a script signer for caddy-acme-proxy over `openssl ca`.
#
#   openssl-ca.sh init <dir>    create a CA in <dir> (once, by hand)
#   openssl-ca.sh               what the proxy runs: the request on stdin
#
# The proxy runs it with a clean environment: set CA_DIR with the signer's
# `env CA_DIR <dir>`. Issue prints the leaf then the CA certificate (PEM);
# revoke marks the certificate revoked in the CA's index and rewrites
# $CA_DIR/crl.pem. Exit codes are the proxy's contract: 0 done, 2 refused
# (first stderr line: the reason), 75 try again later, anything else a
# failure the proxy retries. Needs bash, jq, openssl and flock.
set -euo pipefail

die() { echo "$2" >&2; exit "$1"; }

if [[ ${1:-} == init ]]; then
	dir=${2:?usage: openssl-ca.sh init <dir>}
	[[ -e $dir/ca.key ]] && die 1 "$dir already holds a CA"
	mkdir -p "$dir/newcerts"
	dir=$(cd "$dir" && pwd)
	: >"$dir/index.txt"
	echo "unique_subject = no" >"$dir/index.txt.attr"
	echo 01 >"$dir/crlnumber"
	# A positive 128-bit serial to start from.
	printf '%s\n' "$(openssl rand -hex 16 | sed 's/^./7/')" >"$dir/serial"
	cat >"$dir/openssl.cnf" <<CNF
[ ca ]
default_ca = CA_default

[ CA_default ]
dir              = $dir
database         = \$dir/index.txt
new_certs_dir    = \$dir/newcerts
certificate      = \$dir/ca.crt
private_key      = \$dir/ca.key
serial           = \$dir/serial
crlnumber        = \$dir/crlnumber
default_md       = sha256
default_days     = 90
default_crl_days = 7
policy           = policy_any
unique_subject   = no
copy_extensions  = none
email_in_dn      = no

[ policy_any ]
commonName = optional

[ req ]
distinguished_name = dn
prompt             = no
[ dn ]
CN = openssl-ca example CA
[ ca_ext ]
basicConstraints       = critical,CA:TRUE
keyUsage               = critical,keyCertSign,cRLSign
subjectKeyIdentifier   = hash
CNF
	openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key" 2>/dev/null
	chmod 600 "$dir/ca.key"
	openssl req -new -x509 -config "$dir/openssl.cnf" -extensions ca_ext -key "$dir/ca.key" \
		-days 3650 -out "$dir/ca.crt"
	echo "CA created in $dir; configure the signer with: env CA_DIR $dir" >&2
	exit 0
fi

: "${CA_DIR:?CA_DIR must name the CA directory (signer env CA_DIR <dir>)}"
cnf=$CA_DIR/openssl.cnf
[[ -r $cnf ]] || die 1 "no CA in $CA_DIR: run openssl-ca.sh init $CA_DIR"

req=$(cat)
[[ $(jq -r .version <<<"$req") == 1 ]] || die 1 "unknown request version"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# b64url_der FIELD FILE: the base64url DER of FIELD, decoded into FILE.
b64url_der() {
	local s
	s=$(jq -r ".$1" <<<"$req" | tr '_-' '/+')
	while ((${#s} % 4)); do s+='='; done
	base64 -d <<<"$s" >"$2"
}

# openssl ca keeps its index and serial in files: one run at a time. A
# long wait is a temporary failure.
exec 9>"$CA_DIR/.lock"
flock -w 20 9 || die 75 "the CA is busy"

case $(jq -r .operation <<<"$req") in
issue)
	b64url_der csr "$work/csr.der"
	openssl req -inform DER -in "$work/csr.der" -out "$work/csr.pem" 2>/dev/null ||
		die 2 "badCSR: the CSR does not parse"
	openssl req -in "$work/csr.pem" -noout -verify 2>/dev/null || die 2 "badCSR: the CSR's signature does not verify"
	# The names come from the order, never from the CSR's extensions.
	san=$(jq -r '[.identifiers[] | (if .type == "ip" then "IP:" else "DNS:" end) + .value] | join(",")' <<<"$req")
	first=$(jq -r '.identifiers[0].value' <<<"$req")
	[[ -n $san && $first != null ]] || die 2 "rejectedIdentifier: the order names nothing"
	# The common name holds at most 64 characters (RFC 5280's
	# ub-common-name): it is the first name that fits, never one cut
	# short, which would name nothing the order asked for (the proxy
	# refuses such a leaf). With no name that fits the subject is empty,
	# and the subjectAltName then critical (RFC 5280 §4.2.1.6).
	cn=$(jq -r '[.identifiers[].value | select(length <= 64)][0] // empty' <<<"$req")
	subj="/CN=$cn" san_critical=
	if [[ -z $cn ]]; then subj=/ san_critical=critical,; fi
	cat >"$work/ext.cnf" <<EXT
[ leaf ]
basicConstraints       = critical,CA:FALSE
keyUsage               = critical,digitalSignature,keyEncipherment
extendedKeyUsage       = serverAuth,clientAuth
subjectKeyIdentifier   = hash
authorityKeyIdentifier = keyid
subjectAltName         = $san_critical$san
EXT
	dates=(-days 90)
	asn1() { date -u -d "$1" +%Y%m%d%H%M%SZ; }
	secs() { date -u -d "$1" +%s; }
	nb=$(jq -r '.not_before // empty' <<<"$req")
	na=$(jq -r '.not_after // empty' <<<"$req")
	# The dates asked for are signed as asked or refused (RFC 8555 §7.4):
	# at most 90 days, never past this CA's own end.
	now=$(date -u +%s)
	ca_end=$(secs "$(openssl x509 -in "$CA_DIR/ca.crt" -noout -enddate | cut -d= -f2)")
	start=$now
	if [[ -n $nb ]]; then start=$(secs "$nb"); fi
	end=$((start + 90 * 86400))
	if [[ -n $na ]]; then end=$(secs "$na"); fi
	((end - start <= 90 * 86400)) || die 2 "badValidity: this CA signs at most 90 days"
	((end <= ca_end)) || die 2 "badValidity: the window ends after this CA does"
	# openssl's -days counts from now, not from -startdate: a notBefore
	# asked for alone gets its end written out, 90 days after it.
	if [[ -n $na || -n $nb ]]; then dates=(-enddate "$(asn1 "@$end")"); fi
	if [[ -n $nb ]]; then dates+=(-startdate "$(asn1 "$nb")"); fi
	openssl ca -batch -notext -config "$cnf" -extfile "$work/ext.cnf" -extensions leaf \
		-subj "$subj" "${dates[@]}" -in "$work/csr.pem" -out "$work/leaf.pem" 2>"$work/err" ||
		die 1 "openssl ca: $( (grep -m1 '^ERROR:' "$work/err" || grep -v '^Using configuration' "$work/err" | tail -n1) || true)"
	cat "$work/leaf.pem" "$CA_DIR/ca.crt"
	;;
revoke)
	b64url_der certificate "$work/cert.der"
	openssl x509 -inform DER -in "$work/cert.der" -out "$work/cert.pem"
	serial=$(openssl x509 -in "$work/cert.pem" -noout -serial | cut -d= -f2)
	# Revoking twice is not an error.
	if awk -F'\t' -v s="$serial" '$1 == "R" && toupper($4) == toupper(s) {found=1} END {exit !found}' "$CA_DIR/index.txt"; then
		exit 0
	fi
	case $(jq -r .reason <<<"$req") in
	1) reason=keyCompromise ;;
	3) reason=affiliationChanged ;;
	4) reason=superseded ;;
	5) reason=cessationOfOperation ;;
	*) reason=unspecified ;; # openssl ca knows no privilegeWithdrawn (9)
	esac
	openssl ca -config "$cnf" -revoke "$work/cert.pem" -crl_reason "$reason" 2>"$work/err" ||
		die 1 "openssl ca -revoke: $( (grep -m1 '^ERROR:' "$work/err" || grep -v '^Using configuration' "$work/err" | tail -n1) || true)"
	openssl ca -config "$cnf" -gencrl -out "$CA_DIR/crl.pem" 2>/dev/null
	;;
*)
	die 2 "unknown operation"
	;;
esac
