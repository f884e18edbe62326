#!/bin/sh
# A script signer for the tests: what it does is the first label of the
# order's first name (ACME_PROXY_IDENTIFIERS). PID_DIR comes from the
# signer's env.
cat >/dev/null
name=${ACME_PROXY_IDENTIFIERS%%,*}
case ${name%%.*} in
refuse-csr) echo "RSA keys only on this CA" >&2; exit 2 ;;
refuse-name) echo "rejectedIdentifier: $name is not in the inventory" >&2; exit 2 ;;
tempfail) echo "the HSM is busy" >&2; exit 75 ;;
crash) echo "openssl: unable to load CA private key" >&2; exit 1 ;;
signal) kill -KILL $$ ;;
timeout)
	sleep 1000 &
	echo $! >"$PID_DIR/timeout.pid"
	sleep 1000
	;;
big) head -c 2000000 /dev/zero | tr '\0' A ;;
garbage) echo "certificate signed, see /tmp/cert.pem" ;;
wrongkey)
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout /dev/null \
		-subj "/CN=$name" -addext "subjectAltName=DNS:$name" -days 1 2>/dev/null
	;;
*) echo "unknown mode for $name" >&2; exit 1 ;;
esac
