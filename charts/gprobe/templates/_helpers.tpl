{{/* Chart name, truncated to 63 characters (DNS label). */}}
{{- define "gprobe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: <release>-<chart>, or the release name alone when it already holds the chart name. */}}
{{- define "gprobe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gprobe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gprobe.labels" -}}
helm.sh/chart: {{ include "gprobe.chart" . }}
app.kubernetes.io/name: {{ include "gprobe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gprobe
{{- end -}}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "agent"). */}}
{{- define "gprobe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gprobe.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gprobe.componentLabels" -}}
{{ include "gprobe.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference of one component: include with (dict "ctx" $ "image" .Values.images.agent). */}}
{{- define "gprobe.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{- define "gprobe.agent.fullname" -}}
{{- printf "%s-agent" (include "gprobe.fullname" .) -}}
{{- end -}}

{{- define "gprobe.operator.fullname" -}}
{{- printf "%s-operator" (include "gprobe.fullname" .) -}}
{{- end -}}

{{- define "gprobe.agent.serviceAccountName" -}}
{{- default (include "gprobe.agent.fullname" .) .Values.serviceAccounts.agent.name -}}
{{- end -}}

{{- define "gprobe.operator.serviceAccountName" -}}
{{- default (include "gprobe.operator.fullname" .) .Values.serviceAccounts.operator.name -}}
{{- end -}}

{{/* The CRI socket on the node, from agent.criSocket. */}}
{{- define "gprobe.agent.criSocket" -}}
{{- $c := .Values.agent.criSocket -}}
{{- if $c.path -}}
{{- $c.path -}}
{{- else if eq $c.runtime "containerd" -}}
/run/containerd/containerd.sock
{{- else if eq $c.runtime "crio" -}}
/var/run/crio/crio.sock
{{- else -}}
{{- fail "agent.criSocket.runtime is custom: set agent.criSocket.path to the CRI socket on the nodes" -}}
{{- end -}}
{{- end -}}

{{/* Leader election is on when asked for, and always with more than one replica. */}}
{{- define "gprobe.operator.leaderElect" -}}
{{- if or .Values.operator.leaderElect (gt (int .Values.operator.replicas) 1) -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret holding OTEL_EXPORTER_OTLP_HEADERS, when headers are configured. */}}
{{- define "gprobe.otlp.headersSecretName" -}}
{{- if .Values.otlp.headersSecret.name -}}
{{- .Values.otlp.headersSecret.name -}}
{{- else if .Values.otlp.headers -}}
{{- printf "%s-otlp-headers" (include "gprobe.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "gprobe.otlp.headersSecretKey" -}}
{{- if .Values.otlp.headersSecret.name -}}
{{- .Values.otlp.headersSecret.key -}}
{{- else -}}
headers
{{- end -}}
{{- end -}}

{{/* otlp.headers as the OTEL_EXPORTER_OTLP_HEADERS string: k1=v1,k2=v2, keys sorted, values
     percent-encoded where they hold '%', ',' or spaces. */}}
{{- define "gprobe.otlp.headersString" -}}
{{- $pairs := list -}}
{{- range $k := keys .Values.otlp.headers | sortAlpha -}}
{{- $v := get $.Values.otlp.headers $k | toString | replace "%" "%25" | replace "," "%2C" | replace " " "%20" -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* Cross-field checks that the schema cannot express. */}}
{{- define "gprobe.validate" -}}
{{- if and .Values.otlp.tls.enabled .Values.otlp.insecure -}}
{{- fail "otlp.tls.enabled and otlp.insecure contradict each other: choose one" -}}
{{- end -}}
{{- if and .Values.otlp.tls.enabled (not .Values.otlp.tls.caSecretName) -}}
{{- fail "otlp.tls.enabled needs otlp.tls.caSecretName: the Secret holding the CA certificate (key otlp.tls.caKey)" -}}
{{- end -}}
{{- if and .Values.otlp.tls.enabled (hasPrefix "http://" .Values.otlp.endpoint) -}}
{{- fail "otlp.tls.enabled with an http:// endpoint: use https://" -}}
{{- end -}}
{{- if and (or .Values.otlp.headers .Values.otlp.headersSecret.name .Values.otlp.tls.enabled) (not .Values.otlp.endpoint) -}}
{{- fail "otlp headers or TLS are set but otlp.endpoint is empty" -}}
{{- end -}}
{{- if and .Values.otlp.headers .Values.otlp.headersSecret.name -}}
{{- fail "give otlp.headers or otlp.headersSecret.name, not both" -}}
{{- end -}}
{{- end -}}

{{/* The TCP port of otlp.endpoint: the URL's port, else 443 (https://) or 80 (http://). The
     schema requires a port where the endpoint has no scheme. */}}
{{- define "gprobe.otlp.port" -}}
{{- $ep := .Values.otlp.endpoint -}}
{{- $hostport := regexReplaceAll "^[a-zA-Z][a-zA-Z0-9+.-]*://" $ep "" -}}
{{- $hostport = regexReplaceAll "[/?#].*$" $hostport "" -}}
{{- $hostport = regexReplaceAll "^.*@" $hostport "" -}}
{{- if regexMatch ":[0-9]+$" $hostport -}}
{{- regexFind "[0-9]+$" $hostport -}}
{{- else if hasPrefix "https://" $ep -}}
443
{{- else -}}
80
{{- end -}}
{{- end -}}

{{/* NetworkPolicy egress rules both components need: the API server and DNS. */}}
{{- define "gprobe.networkPolicy.commonEgress" -}}
{{- $np := .Values.networkPolicy -}}
# The Kubernetes API server.
- ports:
    {{- range $np.apiServer.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
  {{- with $np.apiServer.cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
# DNS.
- ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
  {{- with $np.dns.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
