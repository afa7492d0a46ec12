#!/usr/bin/env bash
# Write channel/index.html and the job summary for an indexed channel/ published at URL.
#   scripts/describe-channel.sh https://<owner>.github.io/<repo>
source "$(dirname "$0")/lib.sh"
url="$(echo "${1:?the URL the channel is published at}" | tr '[:upper:]' '[:lower:]')"
{
  echo "<!doctype html><title>mmstack channel</title><h1>mmcv conda channel</h1>"
  echo "<pre>conda install -c $url -c conda-forge mmcv</pre><ul>"
  for pkg in channel/*/*.conda; do echo "<li>${pkg#channel/}</li>"; done
  echo "</ul>"
} > channel/index.html
{
  echo "### Channel"
  echo '```'
  echo "conda install -c $url -c conda-forge mmcv"
  echo '```'
  ls channel/*/*.conda | sed 's/^/- /'
} | summary
