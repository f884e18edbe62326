#!/bin/sh
# Runs the example script signer ($EXAMPLE), holding a revocation until
# the test creates $HOLD_DIR/release.
if [ "$ACME_PROXY_OPERATION" = revoke ]; then
	while [ ! -e "$HOLD_DIR/release" ]; do sleep 0.05; done
fi
exec "$EXAMPLE"
