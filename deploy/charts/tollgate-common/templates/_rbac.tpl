{{/*
RBAC of a service, from files/rbac.yaml: `make manifests` copies it there from services/<name>/rbac.yaml,
the list of every API call the service makes. clusterRules -> ClusterRole; namespaceRules -> Role in the
release namespace.
*/}}
{{- define "tollgate.rbac" -}}
{{- $rbac := .Files.Get "files/rbac.yaml" | fromYaml -}}
{{- $name := include "tollgate.fullname" . -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "tollgate.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
automountServiceAccountToken: true
{{- if $rbac.clusterRules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
rules:
  {{- toYaml $rbac.clusterRules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
- kind: ServiceAccount
  name: {{ include "tollgate.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
{{- if $rbac.namespaceRules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
rules:
  {{- toYaml $rbac.namespaceRules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
- kind: ServiceAccount
  name: {{ include "tollgate.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
{{- end -}}
