{{/* Names are fixed, not release-prefixed: the controller's Lease and pause ConfigMap and the
agent's admission policy refer to them, and the CRD and policy are cluster singletons anyway. */}}

{{- define "gitops-gpu.labels" -}}
app.kubernetes.io/name: gitops-gpu
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gitops-gpu
{{- end }}

{{- define "gitops-gpu.selector" -}}
app.kubernetes.io/name: gitops-gpu
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gitops-gpu.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Restricted Pod Security for both pods: no root, no privilege escalation, no capabilities,
read-only root filesystem (writable paths are emptyDirs). */}}
{{- define "gitops-gpu.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "gitops-gpu.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end }}

{{- define "gitops-gpu.agentUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:gitops-gpu-agent
{{- end }}
