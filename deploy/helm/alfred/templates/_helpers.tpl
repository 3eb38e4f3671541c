{{/* Names and labels. */}}
{{- define "alfred.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "alfred.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "alfred.selectorLabels" -}}
app.kubernetes.io/name: {{ include "alfred.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "alfred.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "alfred.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: alfred
{{- end -}}

{{- define "alfred.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "alfred.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The migration Job's: the chart's own is not there yet when a pre-install hook runs. */}}
{{- define "alfred.migrateServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- printf "%s-migrate" (include "alfred.serviceAccountName" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- include "alfred.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{- define "alfred.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The public URL, checked: production refuses anything but https://. */}}
{{- define "alfred.publicUrl" -}}
{{- $url := required "alfred.publicUrl is required: the https:// URL users reach Alfred at" .Values.alfred.publicUrl -}}
{{- if not (hasPrefix "https://" $url) -}}
{{- fail (printf "alfred.publicUrl must start with https:// (ALFRED_ENV=production refuses anything else), got %q" $url) -}}
{{- end -}}
{{- trimSuffix "/" $url -}}
{{- end -}}

{{/* The Host header the web probes send: ALLOWED_HOSTS admits only the public host. */}}
{{- define "alfred.publicHost" -}}
{{- (urlParse (include "alfred.publicUrl" .)).host -}}
{{- end -}}

{{/* The Secret every container reads with envFrom: the one given, or the chart's. */}}
{{- define "alfred.secretName" -}}
{{- default (include "alfred.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{/* The chart's Secret's data, checked: what production requires must be there. */}}
{{- define "alfred.secretData" -}}
{{- $values := .Values.secret.values -}}
{{- range $key := list "DATABASE_URL" "CELERY_BROKER_URL" "ALFRED_SECRET_KEY" -}}
{{- if not (get $values $key) -}}
{{- fail (printf "secret.values.%s is required (or name a Secret holding it in secret.existingSecret)" $key) -}}
{{- end -}}
{{- end -}}
{{- $key := get $values "ALFRED_SECRET_KEY" | toString -}}
{{- if or (lt (len $key) 50) (lt (len (splitList "" $key | uniq)) 5) -}}
{{- fail "secret.values.ALFRED_SECRET_KEY must be 50 or more random characters (production refuses less)" -}}
{{- end -}}
{{- range $key, $value := $values }}
{{- if $value }}
{{ $key }}: {{ $value | toString | b64enc | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The environment of every Alfred container (web, worker, beat, migrate). */}}
{{- define "alfred.env" -}}
- name: ALFRED_ENV
  value: production
- name: ALFRED_PUBLIC_URL
  value: {{ include "alfred.publicUrl" . | quote }}
- name: ALFRED_TRUST_PROXY_HEADERS
  value: {{ ternary "1" "0" .Values.alfred.trustProxyHeaders | quote }}
- name: ALFRED_READ_ONLY
  value: {{ ternary "1" "0" .Values.alfred.readOnly | quote }}
- name: ALFRED_LOG_LEVEL
  value: {{ .Values.alfred.logLevel | quote }}
- name: ALFRED_METRICS_NETWORKS
  value: {{ join "," .Values.metrics.networks | quote }}
- name: ALFRED_TRUSTED_PROXIES
  value: {{ join "," .Values.alfred.trustedProxies | quote }}
{{- range $name, $value := .Values.alfred.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with .Values.alfred.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A probe from values; httpGet probes get the public Host header. */}}
{{- define "alfred.probe" -}}
{{- $probe := deepCopy .probe -}}
{{- if hasKey $probe "httpGet" -}}
{{- $get := get $probe "httpGet" -}}
{{- $headers := default (list) (get $get "httpHeaders") -}}
{{- $_ := set $get "httpHeaders" (append $headers (dict "name" "Host" "value" .host)) -}}
{{- end -}}
{{- toYaml $probe -}}
{{- end -}}

{{/*
A Deployment of one component (web, worker, beat): the same image, security, environment and
scheduling, with the component's command, replicas, probes, grace and resources.
  dict "root" $ "component" "worker" "values" .Values.worker "args" (list ...) "ports" (list ...)
*/}}
{{- define "alfred.deployment" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $values := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "alfred.fullname" $root }}-{{ $component }}
  labels:
    {{- include "alfred.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
spec:
  replicas: {{ $values.replicas }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "alfred.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ $component }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "alfred.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ $component }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- /* A changed Secret of the chart's rolls the pods: envFrom is read at start only. */}}
      {{- $annotations := deepCopy (default (dict) $root.Values.podAnnotations) }}
      {{- if and $root.Values.metrics.scrapeAnnotations .metricsPort }}
      {{- $_ := set $annotations "prometheus.io/scrape" "true" }}
      {{- $_ := set $annotations "prometheus.io/port" (toString .metricsPort) }}
      {{- $_ := set $annotations "prometheus.io/path" "/metrics" }}
      {{- end }}
      {{- if not $root.Values.secret.existingSecret }}
      {{- $_ := set $annotations "checksum/secret" (include "alfred.secretData" $root | sha256sum) }}
      {{- end }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "alfred.serviceAccountName" $root }}
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: {{ $values.terminationGracePeriodSeconds }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ $component }}
          image: {{ include "alfred.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command:
            {{- toYaml .args | nindent 12 }}
          {{- with .ports }}
          ports:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          env:
            {{- include "alfred.env" $root | nindent 12 }}
            {{- if .metricsPort }}
            # prometheus-client's multiprocess files: this pod's processes, new with the pod
            - name: PROMETHEUS_MULTIPROC_DIR
              value: /var/run/alfred-metrics
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          envFrom:
            - secretRef:
                name: {{ include "alfred.secretName" $root }}
          {{- range $kind := list "startupProbe" "livenessProbe" "readinessProbe" }}
          {{- with get $values $kind }}
          {{ $kind }}:
            {{- include "alfred.probe" (dict "probe" . "host" (include "alfred.publicHost" $root)) | nindent 12 }}
          {{- end }}
          {{- end }}
          {{- with .lifecycle }}
          lifecycle:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if .metricsPort }}
            - name: metrics
              mountPath: /var/run/alfred-metrics
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: {{ $root.Values.tmpSizeLimit }}
        {{- if .metricsPort }}
        - name: metrics
          emptyDir:
            sizeLimit: 64Mi
        {{- end }}
      {{- if $root.Values.podSpread.enabled }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: {{ $root.Values.podSpread.topologyKey }}
          whenUnsatisfiable: {{ $root.Values.podSpread.whenUnsatisfiable }}
          labelSelector:
            matchLabels:
              {{- include "alfred.selectorLabels" $root | nindent 14 }}
              app.kubernetes.io/component: {{ $component }}
      {{- end }}
      {{- with $root.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* A component's PodDisruptionBudget: a drain takes at most this many of its pods at once. */}}
{{- define "alfred.pdb" -}}
{{- $root := .root -}}
{{- $pdb := .values.podDisruptionBudget -}}
{{- if $pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "alfred.fullname" $root }}-{{ .component }}
  labels:
    {{- include "alfred.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if hasKey $pdb "minAvailable" }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "alfred.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}
