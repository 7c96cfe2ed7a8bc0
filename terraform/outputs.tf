# Read by `python -m cleanrl_utils.submit_exp` from `terraform output -json > outputs.json`.
# The names and shapes are the contract between terraform/, docker/ and submit_exp; do not
# rename them.

output "region" {
  description = "AWS region of every resource."
  value       = var.region
}

output "ecr_repository_url" {
  description = "ECR repository of both images (tags cpu-<sha>, cuda-<sha>, cpu-latest, cuda-latest)."
  value       = aws_ecr_repository.this.repository_url
}

output "job_queues" {
  description = "Job queue names: cpu_spot, cpu_on_demand, gpu_spot, gpu_on_demand."
  value       = { for key, queue in aws_batch_job_queue.this : key => queue.name }
}

output "job_definitions" {
  description = "Job definition names: cpu, gpu."
  value       = { for key, definition in aws_batch_job_definition.this : key => definition.name }
}

output "checkpoint_bucket" {
  description = "S3 bucket for run directories and checkpoints (jobs may use only the checkpoint_prefix/ keys)."
  value       = aws_s3_bucket.checkpoints.bucket
}

output "log_group" {
  description = "CloudWatch log group of the jobs."
  value       = aws_cloudwatch_log_group.jobs.name
}

output "wandb_secret_arn" {
  description = "ARN of the W&B API key secret; jobs get it as WANDB_API_KEY through the job definitions' secrets."
  value       = local.wandb_secret_arn
}

output "job_role_arn" {
  description = "IAM role of the jobs (read/write s3://checkpoint_bucket/checkpoint_prefix/*)."
  value       = aws_iam_role.job.arn
}

output "execution_role_arn" {
  description = "IAM role that starts the job containers (image pull, logs, W&B secret)."
  value       = aws_iam_role.execution.arn
}

output "checkpoint_prefix" {
  description = "The key prefix of checkpoint_bucket that the jobs may read and write (submit_exp puts sweeps under it)."
  value       = var.checkpoint_prefix
}
