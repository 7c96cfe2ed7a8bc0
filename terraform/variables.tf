# Inputs. None holds a secret: the W&B API key is put into Secrets Manager (or SSM Parameter
# Store) with the aws CLI and reaches a job only through the job definition's `secrets`.

variable "region" {
  description = "AWS region for every resource, e.g. us-east-1."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Prefix of every resource name: 2-16 lower case letters, digits and hyphens (IAM role name prefixes are limited to 38 characters)."
  type        = string
  default     = "cleanrl"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,15}$", var.name))
    error_message = "name must be 2-16 characters: lower case letters, digits and hyphens, starting with a letter."
  }
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}

# --- network -------------------------------------------------------------------------------

variable "subnet_ids" {
  description = "Existing subnets for the compute environments (they need a route to the internet or VPC endpoints for ECR, ECS, S3, CloudWatch Logs and Secrets Manager). Empty: a minimal VPC is created."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "Existing security groups for the instances; used only with subnet_ids. Empty: one with no inbound rule and HTTPS-only egress is created."
  type        = list(string)
  default     = []
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC created when subnet_ids is empty."
  type        = string
  default     = "10.42.0.0/16"
}

variable "availability_zone_count" {
  description = "Number of availability zones (one public subnet each) in the created VPC; more zones give spot more capacity pools."
  type        = number
  default     = 3

  validation {
    condition     = var.availability_zone_count >= 1 && var.availability_zone_count <= 6
    error_message = "availability_zone_count must be between 1 and 6."
  }
}

# --- compute -------------------------------------------------------------------------------

variable "cpu_instance_types" {
  description = "Instance types or families of the CPU compute environments (Batch picks among them)."
  type        = list(string)
  default     = ["c6i", "c7i", "m6i", "m7i"]
}

variable "gpu_instance_types" {
  description = "Instance types or families of the GPU compute environments (NVIDIA GPUs)."
  type        = list(string)
  default     = ["g5", "g6"]
}

variable "max_vcpus_cpu" {
  description = "Most vCPUs each CPU compute environment (spot, on-demand) may run at once; caps the cost."
  type        = number
  default     = 256
}

variable "max_vcpus_gpu" {
  description = "Most vCPUs each GPU compute environment (spot, on-demand) may run at once; caps the cost."
  type        = number
  default     = 64
}

variable "min_vcpus" {
  description = "vCPUs kept running when no job is queued; 0 scales the environments to nothing when idle."
  type        = number
  default     = 0
}

variable "spot_allocation_strategy" {
  description = "Allocation strategy of the spot compute environments."
  type        = string
  default     = "SPOT_CAPACITY_OPTIMIZED"

  validation {
    condition     = contains(["SPOT_CAPACITY_OPTIMIZED", "SPOT_PRICE_CAPACITY_OPTIMIZED"], var.spot_allocation_strategy)
    error_message = "spot_allocation_strategy must be SPOT_CAPACITY_OPTIMIZED or SPOT_PRICE_CAPACITY_OPTIMIZED."
  }
}

variable "spot_bid_percentage" {
  description = "Highest spot price, in percent of the on-demand price, at which spot instances are launched."
  type        = number
  default     = 100
}

variable "cpu_image_type" {
  description = "Batch AMI type of the CPU compute environments."
  type        = string
  default     = "ECS_AL2023"
}

variable "gpu_image_type" {
  description = "Batch AMI type of the GPU compute environments (NVIDIA driver included)."
  type        = string
  default     = "ECS_AL2023_NVIDIA"
}

# --- jobs ----------------------------------------------------------------------------------

variable "cpu_image_tag" {
  description = "Tag of the CPU image in the ECR repository that the cpu job definition runs (docker/build_push.sh pushes cpu-<git sha> and cpu-latest)."
  type        = string
  default     = "cpu-latest"
}

variable "gpu_image_tag" {
  description = "Tag of the CUDA image in the ECR repository that the gpu job definition runs."
  type        = string
  default     = "cuda-latest"
}

variable "cpu_job_vcpus" {
  description = "vCPUs of one cpu job (submit_exp may override per job)."
  type        = number
  default     = 2
}

variable "cpu_job_memory_mib" {
  description = "Memory of one cpu job, MiB."
  type        = number
  default     = 4096
}

variable "gpu_job_vcpus" {
  description = "vCPUs of one gpu job."
  type        = number
  default     = 4
}

variable "gpu_job_memory_mib" {
  description = "Memory of one gpu job, MiB (leave room for the ECS agent: a g5.xlarge has 16 GiB)."
  type        = number
  default     = 14336
}

variable "gpu_job_gpus" {
  description = "GPUs of one gpu job."
  type        = number
  default     = 1
}

variable "retry_attempts" {
  description = "Attempts per job (1-10). A job whose host went away (spot reclamation: status reason 'Host EC2*') is retried and resumes from its checkpoint in S3; any other failure ends it."
  type        = number
  default     = 5

  validation {
    condition     = var.retry_attempts >= 1 && var.retry_attempts <= 10
    error_message = "retry_attempts must be between 1 and 10 (the AWS Batch limit)."
  }
}

variable "job_timeout_seconds" {
  description = "Time limit of one job attempt, seconds (at least 60). On timeout Batch sends SIGTERM; the script writes a checkpoint and exits 143."
  type        = number
  default     = 86400

  validation {
    condition     = var.job_timeout_seconds >= 60
    error_message = "job_timeout_seconds must be at least 60 (the AWS Batch minimum)."
  }
}

# --- storage, logs, secrets ----------------------------------------------------------------

variable "log_retention_days" {
  description = "Days CloudWatch keeps job logs."
  type        = number
  default     = 365
}

variable "checkpoint_noncurrent_days" {
  description = "Days S3 keeps overwritten (noncurrent) versions of checkpoint objects."
  type        = number
  default     = 7
}

variable "checkpoint_expiration_days" {
  description = "Days after which run directories in the checkpoint bucket are deleted; 0 keeps them."
  type        = number
  default     = 0
}

variable "ecr_keep_images" {
  description = "Number of most recent images kept in the ECR repository; older ones are expired."
  type        = number
  default     = 30
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete a non-empty checkpoint bucket and ECR repository. false: empty them first (terraform/README.md)."
  type        = bool
  default     = false
}

variable "wandb_secret_arn" {
  description = "ARN of an existing secret holding the W&B API key: a Secrets Manager secret (arn:...:secretsmanager:...) or an SSM SecureString parameter (arn:...:ssm:...:parameter/...). Empty: an empty Secrets Manager secret is created; put its value with the aws CLI."
  type        = string
  default     = ""

  validation {
    condition     = var.wandb_secret_arn == "" || can(regex("^arn:[a-z-]+:(secretsmanager|ssm):", var.wandb_secret_arn))
    error_message = "wandb_secret_arn must be empty or the ARN of a Secrets Manager secret or SSM parameter."
  }
}

variable "wandb_secret_kms_key_arn" {
  description = "ARN of the customer managed KMS key that encrypts an existing wandb_secret_arn, if any (the execution role gets kms:Decrypt on it). Empty: none needed."
  type        = string
  default     = ""
}

variable "checkpoint_prefix" {
  description = "Key prefix in the checkpoint bucket under which jobs read and write run directories (s3://BUCKET/PREFIX/<run name>/); the job role can touch nothing else."
  type        = string
  default     = "runs"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*$", var.checkpoint_prefix))
    error_message = "checkpoint_prefix must be one path segment (letters, digits, '.', '_', '-') without slashes."
  }
}

variable "root_volume_gib" {
  description = "Size of each instance's encrypted root volume, GiB (holds the images: the CUDA one is several GiB)."
  type        = number
  default     = 100
}
