# Network of the compute environments: the subnets and security groups given in variables,
# or (subnet_ids empty) a minimal VPC: public subnets, an internet gateway, no NAT gateway (it
# would cost by the hour), and a security group with no inbound rule and HTTPS-only egress.
# Everything the instances and jobs reach (ECR, ECS, S3, CloudWatch Logs, Secrets Manager,
# SSM, W&B) is HTTPS; DNS, NTP and the instance metadata service are link-local and not
# filtered by security groups.

locals {
  create_vpc         = length(var.subnet_ids) == 0
  subnet_ids         = local.create_vpc ? aws_subnet.public[*].id : var.subnet_ids
  security_group_ids = local.create_vpc || length(var.security_group_ids) == 0 ? [one(aws_security_group.batch[*].id)] : var.security_group_ids
  vpc_id             = local.create_vpc ? one(aws_vpc.this[*].id) : one(data.aws_subnet.given[*].vpc_id)
}

data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:the created VPC takes the region's first availability_zone_count zones; to pin zones, make the subnets yourself and pass subnet_ids
  state = "available"
}

data "aws_subnet" "given" {
  count = local.create_vpc ? 0 : 1
  id    = var.subnet_ids[0]
}

resource "aws_vpc" "this" {
  #checkov:skip=CKV2_AWS_11:flow logs of a VPC that only holds short-lived batch instances with no inbound rule would cost more than they tell; use subnet_ids with an audited VPC when flow logs are required
  count                = local.create_vpc ? 1 : 0
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = "${var.name}-batch" }
}

# The default security group of the VPC allows nothing (nothing uses it).
resource "aws_default_security_group" "this" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.this[0].id
}

resource "aws_internet_gateway" "this" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = { Name = "${var.name}-batch" }
}

resource "aws_subnet" "public" {
  #checkov:skip=CKV_AWS_130:instances need a public address to reach ECR, ECS and S3 without a NAT gateway (billed by the hour); their security group has no inbound rule
  count                   = local.create_vpc ? var.availability_zone_count : 0
  vpc_id                  = aws_vpc.this[0].id
  availability_zone       = data.aws_availability_zones.available.names[count.index]
  cidr_block              = cidrsubnet(var.vpc_cidr, 4, count.index)
  map_public_ip_on_launch = true
  tags                    = { Name = "${var.name}-batch-${data.aws_availability_zones.available.names[count.index]}" }
}

resource "aws_route_table" "public" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.this[0].id

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this[0].id
  }

  tags = { Name = "${var.name}-batch-public" }
}

resource "aws_route_table_association" "public" {
  count          = local.create_vpc ? var.availability_zone_count : 0
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_security_group" "batch" {
  #checkov:skip=CKV2_AWS_5:attached to the Batch compute environments (batch.tf), a link checkov does not follow
  count       = local.create_vpc || length(var.security_group_ids) == 0 ? 1 : 0
  name        = "${var.name}-batch"
  description = "Batch instances: no inbound traffic, HTTPS out only"
  vpc_id      = local.vpc_id

  egress {
    description = "HTTPS to AWS APIs (ECR, ECS, S3, CloudWatch Logs, Secrets Manager, SSM) and W&B"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }

  tags = { Name = "${var.name}-batch" }
}
