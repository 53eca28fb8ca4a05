# Certificate and kubeconfig helpers shared by cluster.sh and realcluster.sh (sourced; set pki=DIR
# first). EC P-256 keys: generated in milliseconds.
# shellcheck shell=bash

# Fails at once, not halfway through a certificate, when the caller forgot to set it.
pki=${pki:?set pki=DIR before sourcing pki.sh}

gen_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# new_ca SUBJECT: $pki/ca.key and ca.crt.
new_ca() {
  gen_key "$pki/ca.key"
  openssl req -x509 -new -key "$pki/ca.key" -subj "$1" -days 3650 -out "$pki/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# sign NAME SUBJECT EXTENSIONS: $pki/NAME.key and NAME.crt, signed by $pki/ca.
sign() {
  gen_key "$pki/$1.key"
  openssl req -new -key "$pki/$1.key" -subj "$2" -out "$pki/$1.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -out "$pki/$1.crt" -extfile <(printf '%b' "$3") 2>/dev/null
  rm "$pki/$1.csr"
}

# sign_client NAME CN [O]: a client certificate for the API server.
sign_client() {
  sign "$1" "${3:+/O=$3}/CN=$2" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth"
}

# write_kubeconfig FILE SERVER_URL NAME: a kubeconfig for the client certificate $pki/NAME.
write_kubeconfig() {
  b64() { base64 -w0 <"$1"; }
  cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: $2
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(b64 "$pki/$3.crt")
    client-key-data: $(b64 "$pki/$3.key")
contexts:
- name: testenv
  context: {cluster: testenv, user: $3}
current-context: testenv
KUBECONFIG
}
