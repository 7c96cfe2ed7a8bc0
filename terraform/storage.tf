# Storage: one customer managed KMS key (checkpoint bucket, log group, W&B secret, ECR
# repository), the S3 bucket for run directories and checkpoints, the ECR repository for both
# images, the CloudWatch log group of the jobs, and the W&B API key secret (created empty).

locals {
  account_id = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition
  # the log group name is known before the group exists: the KMS key policy refers to it
  log_group_name   = "/aws/batch/${var.name}"
  log_group_arn    = "arn:${local.partition}:logs:${var.region}:${local.account_id}:log-group:${local.log_group_name}"
  create_secret    = var.wandb_secret_arn == ""
  wandb_secret_arn = local.create_secret ? one(aws_secretsmanager_secret.wandb[*].arn) : var.wandb_secret_arn
  wandb_secret_ssm = can(regex("^arn:[a-z-]+:ssm:", local.wandb_secret_arn))
}

# --- KMS -----------------------------------------------------------------------------------

data "aws_iam_policy_document" "kms" {
  #checkov:skip=CKV_AWS_109:key policy: resource "*" is this key only, and only the account itself and CloudWatch Logs (for this log group) are principals
  #checkov:skip=CKV_AWS_111:key policy: resource "*" is this key only, and only the account itself and CloudWatch Logs (for this log group) are principals
  #checkov:skip=CKV_AWS_356:key policy: resource "*" is this key only, and only the account itself and CloudWatch Logs (for this log group) are principals
  statement {
    # least-privilege exception: a key policy must let the account administer its own key
    # (without it the key becomes unmanageable); in a key policy, resource "*" is this key.
    sid       = "AccountAdministersKey"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account_id}:root"]
    }
  }

  statement {
    # least-privilege exception: in a key policy, resource "*" is this key; the condition
    # limits CloudWatch Logs to this log group.
    sid       = "CloudWatchLogsEncryptsThisLogGroup"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]

    principals {
      type        = "Service"
      identifiers = ["logs.${var.region}.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = [local.log_group_arn]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "${var.name}: checkpoints, job logs, W&B secret, images"
  enable_key_rotation     = true
  deletion_window_in_days = 7
  policy                  = data.aws_iam_policy_document.kms.json
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this.key_id
}

# --- S3: run directories and checkpoints ---------------------------------------------------

resource "aws_s3_bucket" "checkpoints" {
  #checkov:skip=CKV_AWS_18:server access logs would need a second bucket; CloudTrail data events are the audit path if one is needed
  #checkov:skip=CKV_AWS_144:run directories can be recomputed; cross-region replication would double the storage cost
  #checkov:skip=CKV2_AWS_62:nothing consumes event notifications of checkpoint writes
  bucket_prefix = "${var.name}-runs-"
  force_destroy = var.force_destroy
}

resource "aws_s3_bucket_versioning" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.this.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_public_access_block" "checkpoints" {
  bucket                  = aws_s3_bucket.checkpoints.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

data "aws_iam_policy_document" "checkpoints_bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.checkpoints.arn,
      "${aws_s3_bucket.checkpoints.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id
  policy = data.aws_iam_policy_document.checkpoints_bucket.json
}

resource "aws_s3_bucket_lifecycle_configuration" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id

  rule {
    id     = "checkpoints"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }

    # a run directory is rewritten many times (checkpoints every N steps); old versions go soon
    noncurrent_version_expiration {
      noncurrent_days = var.checkpoint_noncurrent_days
    }

    dynamic "expiration" {
      for_each = var.checkpoint_expiration_days > 0 ? [1] : []
      content {
        days = var.checkpoint_expiration_days
      }
    }
  }
}

# --- ECR -----------------------------------------------------------------------------------

resource "aws_ecr_repository" "this" {
  #checkov:skip=CKV_AWS_51:tags are immutable except the moving cpu-latest/cuda-latest tags (IMMUTABLE_WITH_EXCLUSION below); the check accepts only IMMUTABLE
  name                 = var.name
  image_tag_mutability = "IMMUTABLE_WITH_EXCLUSION"
  force_delete         = var.force_destroy

  # cpu-<git sha> and cuda-<git sha> can never be overwritten; only the *-latest tags move
  image_tag_mutability_exclusion_filter {
    filter      = "*-latest"
    filter_type = "WILDCARD"
  }

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = aws_kms_key.this.arn
  }
}

resource "aws_ecr_lifecycle_policy" "this" {
  repository = aws_ecr_repository.this.name
  policy = jsonencode({
    rules = [
      {
        rulePriority = 1
        description  = "expire untagged images after 1 day"
        selection = {
          tagStatus   = "untagged"
          countType   = "sinceImagePushed"
          countUnit   = "days"
          countNumber = 1
        }
        action = { type = "expire" }
      },
      {
        rulePriority = 2
        description  = "keep the ${var.ecr_keep_images} most recent images"
        selection = {
          tagStatus   = "any"
          countType   = "imageCountMoreThan"
          countNumber = var.ecr_keep_images
        }
        action = { type = "expire" }
      },
    ]
  })
}

# --- CloudWatch Logs -----------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "jobs" {
  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.this.arn
}

# --- W&B API key ---------------------------------------------------------------------------

# Created without a value: `aws secretsmanager put-secret-value` puts it (terraform/README.md),
# so the key is in no .tf, .tfvars or Terraform state.
resource "aws_secretsmanager_secret" "wandb" {
  #checkov:skip=CKV2_AWS_57:a W&B API key is rotated in W&B, not by a Lambda; put the new value with the aws CLI
  count                   = local.create_secret ? 1 : 0
  name_prefix             = "${var.name}/wandb-api-key-"
  description             = "W&B API key for ${var.name} Batch jobs (env var WANDB_API_KEY); value put with the aws CLI"
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
}
