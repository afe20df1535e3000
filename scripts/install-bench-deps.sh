#!/usr/bin/env bash
# What the full benchmark run needs beyond the tests: the test dependencies
# (among them iperf3 and fio, the bench's network and disk references)
# plus Debian's linux-source-6.1 (the real ~80k-file tree of the LOSF
# scenario). `lightpath bench --quick` (run by CI) does not need it.
set -euo pipefail
LIGHTPATH_EXTRA_PKGS="linux-source-6.1 ${LIGHTPATH_EXTRA_PKGS:-}" exec bash "$(dirname "$0")/install-test-deps.sh"
