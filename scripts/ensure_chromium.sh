#!/usr/bin/env bash
# The browser tests drive the system Chromium. Install it from the distribution's packages
# when we can (root on Debian/Ubuntu). Exits 1, saying why, when there is still none: the
# browser tests then fail (they do not skip), so a missing browser cannot pass unnoticed.
have_chromium() { command -v chromium >/dev/null 2>&1 || [ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ]; }
have_chromium && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing chromium for the browser tests"
  log=$(mktemp)
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >"$log" 2>&1; then
    tail -n 20 "$log" >&2
  fi
  rm -f "$log"
fi
have_chromium && exit 0
echo "No system Chromium: the browser tests (tests/browser) will fail. Install the 'chromium' package" \
     "(this script does so as root on Debian/Ubuntu) or set CHROMIUM_PATH." >&2
exit 1
