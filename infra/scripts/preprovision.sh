#!/bin/sh
# azd preprovision hook: records this machine's public IPv4 address as KEEL_CLIENT_IP so that the SQL
# firewall admits the post-provision step (migrations and the database user). Set KEEL_CLIENT_IP yourself
# (or to "none") to skip the lookup.
set -eu

current="$(azd env get-value KEEL_CLIENT_IP 2>/dev/null || true)"
case "$current" in
  none) echo "KEEL_CLIENT_IP=none: no client firewall rule"; azd env set KEEL_CLIENT_IP ""; exit 0 ;;
  *.*.*.*) echo "KEEL_CLIENT_IP=$current"; exit 0 ;;
esac

ip=""
if command -v curl >/dev/null 2>&1; then
  ip="$(curl -fsS --max-time 10 https://api.ipify.org 2>/dev/null || true)"
fi
case "$ip" in
  *.*.*.*)
    azd env set KEEL_CLIENT_IP "$ip"
    echo "KEEL_CLIENT_IP=$ip (SQL firewall rule AllowDeploymentClient)"
    ;;
  *)
    echo "Could not determine this machine's public IP; set it with: azd env set KEEL_CLIENT_IP <ipv4>" >&2
    echo "(without it, run the post-provision step from a machine the SQL firewall admits)" >&2
    ;;
esac
