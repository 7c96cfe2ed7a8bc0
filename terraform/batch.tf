# AWS Batch: four managed compute environments (CPU and GPU, spot and on-demand), a job queue
# on each, and one job definition per image (cpu, gpu) with resources, retry strategy, time
# limit, CloudWatch logs and the W&B key as a secret.

locals {
  compute_environments = {
    cpu_spot = {
      type                = "SPOT"
      allocation_strategy = var.spot_allocation_strategy
      instance_types      = var.cpu_instance_types
      max_vcpus           = var.max_vcpus_cpu
      image_type          = var.cpu_image_type
    }
    cpu_on_demand = {
      type                = "EC2"
      allocation_strategy = "BEST_FIT_PROGRESSIVE"
      instance_types      = var.cpu_instance_types
      max_vcpus           = var.max_vcpus_cpu
      image_type          = var.cpu_image_type
    }
    gpu_spot = {
      type                = "SPOT"
      allocation_strategy = var.spot_allocation_strategy
      instance_types      = var.gpu_instance_types
      max_vcpus           = var.max_vcpus_gpu
      image_type          = var.gpu_image_type
    }
    gpu_on_demand = {
      type                = "EC2"
      allocation_strategy = "BEST_FIT_PROGRESSIVE"
      instance_types      = var.gpu_instance_types
      max_vcpus           = var.max_vcpus_gpu
      image_type          = var.gpu_image_type
    }
  }

  # container properties of the two job definitions (AWS Batch RegisterJobDefinition
  # containerProperties). submit_exp overrides command, and may override vCPU/memory/GPU,
  # per job; the image is fixed per definition revision.
  job_definitions = {
    cpu = {
      image   = "${aws_ecr_repository.this.repository_url}:${var.cpu_image_tag}"
      command = ["python", "cleanrl/ppo.py", "--help"]
      resourceRequirements = [
        { type = "VCPU", value = tostring(var.cpu_job_vcpus) },
        { type = "MEMORY", value = tostring(var.cpu_job_memory_mib) },
      ]
      jobRoleArn       = aws_iam_role.job.arn
      executionRoleArn = aws_iam_role.execution.arn
      secrets = [
        { name = "WANDB_API_KEY", valueFrom = local.wandb_secret_arn },
      ]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.jobs.name
          "awslogs-region"        = var.region
          "awslogs-stream-prefix" = "cpu"
        }
      }
      privileged = false
    }
    gpu = {
      image   = "${aws_ecr_repository.this.repository_url}:${var.gpu_image_tag}"
      command = ["python", "cleanrl/ppo.py", "--help"]
      resourceRequirements = [
        { type = "VCPU", value = tostring(var.gpu_job_vcpus) },
        { type = "MEMORY", value = tostring(var.gpu_job_memory_mib) },
        { type = "GPU", value = tostring(var.gpu_job_gpus) },
      ]
      jobRoleArn       = aws_iam_role.job.arn
      executionRoleArn = aws_iam_role.execution.arn
      secrets = [
        { name = "WANDB_API_KEY", valueFrom = local.wandb_secret_arn },
      ]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.jobs.name
          "awslogs-region"        = var.region
          "awslogs-stream-prefix" = "gpu"
        }
      }
      privileged = false
    }
  }
}

# IMDSv2 only, hop limit 1: the containers cannot reach the instance role's credentials (the
# job gets its own role through the ECS agent); encrypted gp3 root volume.
resource "aws_launch_template" "batch" {
  name_prefix = "${var.name}-batch-"

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = "/dev/xvda"

    ebs {
      volume_size           = var.root_volume_gib
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }
}

resource "aws_batch_compute_environment" "this" {
  for_each     = local.compute_environments
  name_prefix  = "${var.name}-${replace(each.key, "_", "-")}-"
  type         = "MANAGED"
  service_role = aws_iam_role.batch_service.arn

  compute_resources {
    type                = each.value.type
    allocation_strategy = each.value.allocation_strategy
    bid_percentage      = each.value.type == "SPOT" ? var.spot_bid_percentage : null
    instance_type       = each.value.instance_types
    min_vcpus           = var.min_vcpus
    max_vcpus           = each.value.max_vcpus
    instance_role       = aws_iam_instance_profile.ecs_instance.arn
    subnets             = local.subnet_ids
    security_group_ids  = local.security_group_ids

    ec2_configuration {
      image_type = each.value.image_type
    }

    launch_template {
      launch_template_id = aws_launch_template.batch.id
      version            = aws_launch_template.batch.latest_version
    }
  }

  lifecycle {
    create_before_destroy = true
  }

  # the service role's policy must outlive the environment, or deletion hangs in DELETING
  depends_on = [aws_iam_role_policy_attachment.batch_service]
}

resource "aws_batch_job_queue" "this" {
  for_each = local.compute_environments
  name     = "${var.name}-${replace(each.key, "_", "-")}"
  state    = "ENABLED"
  priority = 1

  compute_environment_order {
    order               = 1
    compute_environment = aws_batch_compute_environment.this[each.key].arn
  }
}

resource "aws_batch_job_definition" "this" {
  for_each              = local.job_definitions
  name                  = "${var.name}-${each.key}"
  type                  = "container"
  platform_capabilities = ["EC2"]
  propagate_tags        = true
  container_properties  = jsonencode(each.value)

  # A reclaimed spot instance fails the attempt with status reason "Host EC2 (instance ...)
  # terminated."; that attempt is retried and resumes from the checkpoint in S3. Any other
  # failure (a bug, a bad flag) ends the job at once.
  retry_strategy {
    attempts = var.retry_attempts

    evaluate_on_exit {
      on_status_reason = "Host EC2*"
      action           = "RETRY"
    }

    evaluate_on_exit {
      on_reason = "*"
      action    = "EXIT"
    }
  }

  timeout {
    attempt_duration_seconds = var.job_timeout_seconds
  }
}
