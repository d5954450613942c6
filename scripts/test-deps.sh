#!/usr/bin/env bash
# Debian packages the tests against the real Java DLedger and RocketMQ's own message store
# need (tests/support/javadledger.py, tests/support/javarocketmq.py): a JDK to compile them, and the jars
# they build and run on; and Prometheus with promtool (tests/node/test_prometheus.py: the shipped
# config, rules and dashboard against a real server). Installs those missing when apt-get can (root, or
# sudo without a password); otherwise says what is missing and goes on: those tests then
# skip, saying why. Java 17 is what PySpark needs too.
set -uo pipefail
pkgs=(default-jdk-headless libnetty-java libslf4j-java libjcommander-java libguava-java libjoda-time-java
      libjaxb-api-java
      # RocketMQ's common and store modules (tests/support/javarocketmq.py)
      libcommons-lang3-java libcommons-validator-java libzstd-jni-java liblz4-java libjna-java
      # RocketMQ 5's controller and epoch files (tests/support/javarocketmq5.py)
      libcommons-collections3-java
      # RocketMQ 5's message store (tests/support/javarocketmq5store.py)
      libcommons-io-java libcommons-codec-java libconversant-disruptor-java libjsr305-java
      # RocketMQ 5's broker and controller processes (tests/support/javarocketmq5broker.py)
      libcommons-cli-java libreflections-java libyaml-snake-java libcaffeine-java libgrpc-java libprotobuf-java
      libjavassist-java libbcpkix-java libbcprov-java
      # the real Prometheus server and promtool (tests/node/test_prometheus.py)
      prometheus)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# a JDK installed some other way will do
if command -v javac >/dev/null; then
  missing=("${missing[@]/default-jdk-headless}")
fi
read -ra missing <<< "${missing[*]}"
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "test-deps: no apt-get; the Java DLedger, RocketMQ and Prometheus tests need: ${missing[*]}" >&2
  exit 0
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then sudo=(sudo -n); else
    echo "test-deps: not root; install ${missing[*]} to run the Java DLedger, RocketMQ and Prometheus tests" >&2
    exit 0
  fi
fi
echo "test-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
  || { "${sudo[@]}" apt-get update -q >/dev/null && "${sudo[@]}" apt-get install -y -q --no-install-recommends \
       "${missing[@]}" >/dev/null; } \
  || echo "test-deps: could not install ${missing[*]}; the Java DLedger, RocketMQ and Prometheus tests will skip" >&2
exit 0
