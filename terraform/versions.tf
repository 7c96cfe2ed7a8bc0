# Terraform and provider versions. The provider floor is 6.50: provider 6.x names the compute
# environment's argument `name` (5.x: `compute_environment_name`), and the ECR repository's
# `image_tag_mutability_exclusion_filter` block is documented in 6.50.0.
terraform {
  required_version = ">= 1.5.7, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.50.0, < 7.0.0"
    }
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge({ Project = var.name }, var.tags)
  }
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
