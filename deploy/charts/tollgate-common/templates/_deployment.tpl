{{/* The Deployment, Service and PodDisruptionBudget of a tollgate service, and its ServiceMonitor when enabled.
The readiness probe is gRPC health on .Values.grpcReadinessPort when set (a plaintext gRPC port), else /readyz. */}}
{{- define "tollgate.deployment" -}}
{{- $name := include "tollgate.fullname" . -}}
{{- $prefix := .Values.envPrefix -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels:
      {{- include "tollgate.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "tollgate.selectorLabels" . | nindent 8 }}
        app.kubernetes.io/part-of: tollgate
      {{- with .Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "tollgate.serviceAccountName" . }}
      # Off: a Service named like the release (tollgate-webhook) would otherwise put TOLLGATE_WEBHOOK_PORT=tcp://...
      # into the environment, where the service's settings (prefix TOLLGATE_WEBHOOK_) read it as their port.
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        fsGroup: 10001
        seccompProfile:
          type: RuntimeDefault
      containers:
      - name: {{ .Chart.Name }}
        image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
        imagePullPolicy: {{ .Values.image.pullPolicy }}
        env:
        - name: {{ $prefix }}HEALTH_PORT
          value: "8080"
        - name: {{ $prefix }}LOG_LEVEL
          value: {{ .Values.logLevel | quote }}
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: POD_UID
          valueFrom:
            fieldRef:
              fieldPath: metadata.uid
        # The semantic conventions' resource attributes of every span, from the Downward API above.
        - name: OTEL_RESOURCE_ATTRIBUTES
          value: "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.uid=$(POD_UID),service.instance.id=$(POD_UID),service.version={{ .Values.image.tag | default .Chart.AppVersion }}"
        {{- with .Values.otel.endpoint }}
        - name: OTEL_EXPORTER_OTLP_ENDPOINT
          value: {{ . | quote }}
        - name: OTEL_EXPORTER_OTLP_PROTOCOL
          value: http/json
        {{- end }}
        {{- include "tollgate.routedipTrust" . | nindent 8 }}
        {{- include "tollgate.endpointPolicy" . | nindent 8 }}
        {{- range $key, $value := .Values.env }}
        - name: {{ $key }}
          value: {{ tpl (toString $value) $ | quote }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- tpl (toYaml .) $ | nindent 8 }}
        {{- end }}
        ports:
        - name: health
          containerPort: 8080
          protocol: TCP
        {{- range .Values.ports }}
        - name: {{ .name }}
          containerPort: {{ .port }}
          protocol: {{ .protocol | default "TCP" }}
        {{- end }}
        livenessProbe:
          httpGet:
            path: /healthz
            port: health
          periodSeconds: 10
        readinessProbe:
          {{- with .Values.grpcReadinessPort }}
          grpc:
            port: {{ . }}
          {{- else }}
          httpGet:
            path: /readyz
            port: health
          {{- end }}
          # Each second: a new pod takes traffic (a Service's endpoints, a rollout's next step) a moment after
          # its service is ready, not up to a period later (docs/real-node.md has the figures).
          periodSeconds: 1
        resources:
          {{- toYaml .Values.resources | nindent 10 }}
        securityContext:
          {{- toYaml .Values.securityContext | nindent 10 }}
        volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- with .Values.extraVolumeMounts }}
        {{- tpl (toYaml .) $ | nindent 8 }}
        {{- end }}
      volumes:
      - name: tmp
        emptyDir: {}
      {{- with .Values.extraVolumes }}
      {{- tpl (toYaml .) $ | nindent 6 }}
      {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- tpl (toYaml .) $ | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
spec:
  selector:
    {{- include "tollgate.selectorLabels" . | nindent 4 }}
  ports:
  - name: health
    port: 8080
    targetPort: health
    protocol: TCP
  {{- range .Values.ports }}
  - name: {{ .name }}
    port: {{ .servicePort | default .port }}
    targetPort: {{ .name }}
    protocol: {{ .protocol | default "TCP" }}
  {{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "tollgate.labels" . | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "tollgate.selectorLabels" . | nindent 6 }}
{{- end }}
{{- with include "tollgate.serviceMonitor" . }}
---
{{ . }}
{{- end }}
{{- end -}}
