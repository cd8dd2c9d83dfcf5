# shellcheck shell=bash
# shellcheck disable=SC2154 # the variables are set by scripts/cluster.sh, which sources this
# Sourced by scripts/cluster.sh: the cluster's CA, the certificates of every component and
# the kubeconfigs that carry them (state in $pki and $state). Uses cluster.sh's variables
# (state, pki, node, node_ip).

# cert NAME CN O [SANS]: a key and a certificate signed by the cluster's CA.
cert() {
  local name="$1" cn="$2" o="$3" sans="${4:-}"
  [[ -f "$pki/$name.crt" ]] && return
  local ext="$pki/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$sans" ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  local subj="/CN=$cn"
  [[ -n "$o" ]] && subj="/O=$o$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" \
    -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$ext"
}

# kubeconfig NAME USER_CERT: a kubeconfig with a client certificate.
make_kubeconfig() {
  local file="$state/$1.kubeconfig" c="$2"
  [[ -f "$file" ]] && return
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: gprobe
    cluster:
      server: https://$node_ip:6443
      certificate-authority: $pki/ca.crt
users:
  - name: $1
    user:
      client-certificate: $pki/$c.crt
      client-key: $pki/$c.key
contexts:
  - name: gprobe
    context: {cluster: gprobe, user: $1}
current-context: gprobe
EOF
}

make_pki() {
  mkdir -p "$pki"
  chmod 700 "$pki"
  if [[ ! -f "$pki/ca.crt" ]]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -days 365 -sha256 \
      -subj "/CN=gprobe-cluster-ca" -out "$pki/ca.crt" 2>/dev/null
  fi
  [[ -f "$pki/sa.key" ]] || openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  [[ -f "$pki/sa.pub" ]] || openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  local apiserver_sans="IP:$node_ip,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default"
  apiserver_sans+=",DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  cert apiserver kube-apiserver "" "$apiserver_sans"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert admin gprobe-admin system:masters
  cert controller-manager system:kube-controller-manager ""
  cert scheduler system:kube-scheduler ""
  cert kube-proxy system:kube-proxy ""
  cert kubelet-client "system:node:$node" system:nodes
  cert kubelet "$node" "" "IP:$node_ip,DNS:$node"
  make_kubeconfig admin admin
  make_kubeconfig controller-manager controller-manager
  make_kubeconfig scheduler scheduler
  make_kubeconfig kube-proxy kube-proxy
  make_kubeconfig kubelet kubelet-client
}
