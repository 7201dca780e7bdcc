{{/*
Names, labels and the generated secret material shared by every template.
*/}}

{{- define "openshell.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* `<release>-openshell-gateway`, or the release name when it already holds the chart name. */}}
{{- define "openshell.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "openshell.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "openshell.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component (gateway, supervisor, test). */}}
{{- define "openshell.selector" -}}
app.kubernetes.io/name: {{ include "openshell.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "openshell.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The namespace of runtime Pods. */}}
{{- define "openshell.workloadsNamespace" -}}
{{ .Values.workloads.namespace | default .Release.Namespace }}
{{- end }}

{{/* The headless Service of raft peers. */}}
{{- define "openshell.peerService" -}}
{{ include "openshell.fullname" . }}-peer
{{- end }}

{{/* `<fullname>-{ordinal}.<fullname>-peer.<ns>.svc.<domain>`: the peer host of a pod (ordinal as given). */}}
{{- define "openshell.peerHost" -}}
{{ include "openshell.fullname" .root }}-{{ .ordinal }}.{{ include "openshell.peerService" .root }}.{{ .root.Release.Namespace }}.svc.{{ .root.Values.clusterDomain }}
{{- end }}

{{/* The client Service's DNS name. */}}
{{- define "openshell.clientHost" -}}
{{ include "openshell.fullname" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end }}

{{- define "openshell.secretName" -}}
{{- $s := index .root.Values.secrets .key }}
{{- $s.existingSecret | default (printf "%s-%s" (include "openshell.fullname" .root) .suffix) }}
{{- end }}

{{/* A PEM block's bytes (as a string) from its PEM text. */}}
{{- define "openshell.pemBytes" -}}
{{- regexReplaceAll "-----[A-Z ]+-----" . "" | nospace | b64dec }}
{{- end }}

{{/*
The cluster signing key, as a dict {seed, public}: 64 hex each. Made once per
render (memoized in .Values so every template sees the same key): from the
Secret the chart created at first install (lookup), else newly generated
(ed25519; the public key is read back from a certificate Helm self-signs
with that key, since Helm has no function that prints a public key).
Empty with secrets.signingKey.existingSecret.
*/}}
{{- define "openshell.signingKey" -}}
{{- if not (hasKey .Values "_openshellSigningKey") }}
{{- $key := dict "seed" "" "public" "" }}
{{- if not .Values.secrets.signingKey.existingSecret }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "openshell.secretName" (dict "root" . "key" "signingKey" "suffix" "signing-key")) }}
{{- if and $existing $existing.data }}
{{- $_ := set $key "seed" (index $existing.data "signing-key" | b64dec | trim) }}
{{- $_ := set $key "public" (index $existing.data "trusted-grant-keys" | b64dec | trim) }}
{{- else }}
{{- $pem := genPrivateKey "ed25519" }}
{{- $_ := set $key "seed" (printf "%x" (include "openshell.pemBytes" $pem) | trunc -64) }}
{{- $cert := genSelfSignedCertWithKey "openshell-grant-key" nil nil 1 $pem }}
{{- $spki := printf "%x" (include "openshell.pemBytes" $cert.Cert) | regexFind "302a300506032b6570032100[0-9a-f]{64}" }}
{{- $_ := set $key "public" ($spki | trunc -64) }}
{{- end }}
{{- end }}
{{- $_ := set .Values "_openshellSigningKey" $key }}
{{- end }}
{{- toJson (get .Values "_openshellSigningKey") }}
{{- end }}

{{/* The trusted grant keys file's content (supervisors and runtimes). */}}
{{- define "openshell.trustedGrantKeys" -}}
{{- if .Values.secrets.signingKey.trustedGrantKeys }}
{{- .Values.secrets.signingKey.trustedGrantKeys | trim }}
{{- else if .Values.secrets.signingKey.existingSecret }}
{{- fail "secrets.signingKey.trustedGrantKeys is required with secrets.signingKey.existingSecret: the public key(s) of its signing-key, one 64-hex key per line (docs/security.md, \"Key files\")" }}
{{- else }}
{{- (include "openshell.signingKey" . | fromJson).public }}
{{- end }}
{{- end }}

{{/* Pod security context shared by gateways, supervisors and the test Pod. */}}
{{- define "openshell.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "openshell.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}
