#!/usr/bin/env bash
# Packs the committed tree (HEAD, no work in progress) for a device call: writes .h200/clean.tgz
# (git-ignored; carry it). On the device, run steps from the unpacked copy:
#   bash scripts/h200/clean_tree.sh            (here)
#   mkdir -p /tmp/clean && tar xzf .h200/clean.tgz -C /tmp/clean && cp -r .whl .h200 /tmp/clean/ \
#     && cd /tmp/clean && bash scripts/h200/drive.sh ...      (there)
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .h200
git archive --format=tar.gz -o .h200/clean.tgz HEAD
echo "$(git rev-parse --short HEAD) $(du -h .h200/clean.tgz | cut -f1)"
