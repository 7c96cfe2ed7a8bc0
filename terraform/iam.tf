# IAM roles, each with the least it needs:
#   batch_service  - AWS Batch manages the compute environments (AWS managed policy, below)
#   ecs_instance   - the ECS agent on the EC2 instances (AWS managed policy, below)
#   execution      - starts a job's container: pulls from this ECR repository, writes to this
#                    log group, reads only the W&B secret
#   job            - the job itself: reads and writes only s3://BUCKET/PREFIX/*
# Policies are aws_iam_policy_document data sources (tests/test_terraform.py reads every
# statement). A statement with a "*" action or resource carries a comment starting
# "least-privilege exception:" that says why.

locals {
  checkpoint_objects_arn = "${aws_s3_bucket.checkpoints.arn}/${var.checkpoint_prefix}/*"
  secret_read_actions    = local.wandb_secret_ssm ? ["ssm:GetParameters"] : ["secretsmanager:GetSecretValue"]
  secret_kms_key_arns    = compact([aws_kms_key.this.arn, var.wandb_secret_kms_key_arn])
}

# --- Batch service role --------------------------------------------------------------------

data "aws_iam_policy_document" "batch_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["batch.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "batch_service" {
  name_prefix        = "${var.name}-batch-service-"
  assume_role_policy = data.aws_iam_policy_document.batch_assume.json
}

resource "aws_iam_role_policy_attachment" "batch_service" {
  # least-privilege exception: AWSBatchServiceRole is the AWS managed policy Batch documents
  # for its service role; Batch creates and deletes EC2 instances, spot requests, ECS clusters
  # and launch templates whose ids are not known in advance, and AWS updates the policy when
  # Batch needs new calls.
  role       = aws_iam_role.batch_service.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AWSBatchServiceRole"
}

# --- ECS instance role ---------------------------------------------------------------------

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "ecs_instance" {
  name_prefix        = "${var.name}-ecs-instance-"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

resource "aws_iam_role_policy_attachment" "ecs_instance" {
  # least-privilege exception: AmazonEC2ContainerServiceforEC2Role is the AWS managed policy
  # the ECS agent needs to register the instance with the cluster Batch creates (its name is
  # chosen by Batch) and to poll for tasks; the containers cannot use these credentials
  # (the launch template sets the metadata hop limit to 1).
  role       = aws_iam_role.ecs_instance.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"
}

resource "aws_iam_instance_profile" "ecs_instance" {
  name_prefix = "${var.name}-ecs-instance-"
  role        = aws_iam_role.ecs_instance.name
}

# --- roles assumed by the job's container (execution and job role) ------------------------

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "execution" {
  name_prefix        = "${var.name}-execution-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

data "aws_iam_policy_document" "execution" {
  statement {
    # least-privilege exception: ecr:GetAuthorizationToken is account-wide and supports no
    # resource but "*"; the pulls themselves are limited to this repository below.
    sid       = "EcrLogin"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }

  statement {
    sid       = "PullThisRepository"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    resources = [aws_ecr_repository.this.arn]
  }

  statement {
    sid       = "WriteThisLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.jobs.arn}:log-stream:*"]
  }

  statement {
    sid       = "ReadWandbSecret"
    actions   = local.secret_read_actions
    resources = [local.wandb_secret_arn]
  }

  statement {
    sid       = "DecryptWandbSecret"
    actions   = ["kms:Decrypt"]
    resources = local.secret_kms_key_arns
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "pull-log-secret"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

resource "aws_iam_role" "job" {
  name_prefix        = "${var.name}-job-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

data "aws_iam_policy_document" "job" {
  statement {
    sid       = "ListRunDirectories"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.checkpoints.arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [var.checkpoint_prefix, "${var.checkpoint_prefix}/*"]
    }
  }

  statement {
    sid = "ReadWriteRunDirectories"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = [local.checkpoint_objects_arn]
  }

  statement {
    # objects are encrypted with the project's key (bucket default encryption)
    sid       = "UseBucketKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${var.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "job" {
  name   = "run-directories"
  role   = aws_iam_role.job.id
  policy = data.aws_iam_policy_document.job.json
}
