#!/usr/bin/env bash
# The browser tests drive the system Chromium. Install it from the distribution's
# packages when we can (root on Debian/Ubuntu); otherwise those tests skip with a reason.
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing chromium for the browser tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1
fi
