"""The machinery every app with background jobs and uploads shares (corpora, tokenizers, labelled
datasets, model imports, exports, neighbour indexes): no app's own, so in no app's folder.

- models.py: JobStatus (the one list of a job's statuses), JobRow (the abstract row), status_field.
- lifecycle.py: a job's life on its row: enqueue, claim, Progress / StageProgress, fail; ActionRefused.
- uploads.py: what every upload shares: the size and type check, keeping the file, the upload
  script's answers.
- serializers.py: JobStatusField, a job's status in the API.
"""
